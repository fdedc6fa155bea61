"""Probe names -> classes. Imports are lazy so that `--probes host` does not import scapy or torch."""

from __future__ import annotations

import importlib

from probes.base import Probe, ProbeContext, ProbeUnavailable

# name -> "module:Class"
PROBES = {
    "gpu": "probes.gpu:GpuProbe",
    "server": "probes.server:ServerProbe",
    "host": "probes.host:HostProbe",
    "irq": "probes.irq:IrqProbe",
    "tcp": "probes.tcp:TcpProbe",
    "capture": "probes.capture:CaptureProbe",
    "stacks": "probes.stacks:StacksProbe",
}
# What `--probes default` means: cheap samplers that are useful on every run. capture and stacks
# are opt-in (they write large files, or pause the server briefly for each dump).
DEFAULT_PROBES = ["gpu", "server", "host", "irq", "tcp"]


def parse_probe_list(text: str | None) -> list[str]:
    """'default', 'all', 'none' or a comma list; unknown names raise ValueError with the valid ones."""
    if text is None or text.strip() in ("", "default"):
        return list(DEFAULT_PROBES)
    text = text.strip()
    if text == "none":
        return []
    if text == "all":
        return list(PROBES)
    names = []
    for item in text.replace(" ", "").split(","):
        if item == "default":
            names.extend(DEFAULT_PROBES)
        elif item in PROBES:
            names.append(item)
        elif item:
            raise ValueError(f"unknown probe {item!r}; choose from {', '.join(PROBES)} (or default, all, none)")
    return list(dict.fromkeys(names))


def make_probe(name: str, ctx: ProbeContext) -> Probe:
    module_name, cls_name = PROBES[name].split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ProbeUnavailable(f"cannot import {module_name} ({exc})") from None
    return getattr(module, cls_name)(ctx)
