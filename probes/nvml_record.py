"""Record an NVML response set on a GPU machine, in the format tests/probes/fake_nvml.py replays.

    python -m probes.nvml_record --samples 3 --interval 1 --out tests/probes/data/nvml_<machine>.json

It makes the same calls as the gpu probe, in the same order, once per sample, so the gpu probe's
tests can run against a real machine's answers where no GPU exists. Unsupported calls are stored
as "NotSupported"; XID events seen during the recording are stored per sample.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from typing import Any

from probes.gpu import NVLINK_RX, NVLINK_TX, XID_EVENT

CALLS = [  # (function, extra args, how to store the answer)
    ("nvmlDeviceGetUtilizationRates", (), lambda u: {"gpu": u.gpu, "memory": u.memory}),
    ("nvmlDeviceGetMemoryInfo", (), lambda m: {"used": m.used, "total": m.total, "free": m.free}),
    ("nvmlDeviceGetClockInfo", (1,), int),
    ("nvmlDeviceGetClockInfo", (2,), int),
    ("nvmlDeviceGetPowerUsage", (), int),
    ("nvmlDeviceGetTemperature", (0,), int),
    ("nvmlDeviceGetCurrentClocksEventReasons", (), int),
    ("nvmlDeviceGetPcieThroughput", (0,), int),
    ("nvmlDeviceGetPcieThroughput", (1,), int),
    (
        "nvmlDeviceGetFieldValues",
        ([NVLINK_TX, NVLINK_RX],),
        lambda vs: [{"nvmlReturn": v.nvmlReturn, "ullVal": v.value.ullVal} for v in vs],
    ),
]


def record(samples: int, interval_s: float, nv: Any = None) -> dict:
    """`nv`: the NVML module (pynvml, or a fake); imported here when not given."""
    if nv is None:
        nv = importlib.import_module("pynvml")

    nv.nvmlInit()
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]

    def call(fn, h, args=(), store=lambda x: x):
        try:
            return store(getattr(nv, fn)(h, *args))
        except nv.NVMLError:
            return "NotSupported"

    devices = [
        {
            "nvmlDeviceGetName": [call("nvmlDeviceGetName", h, store=_text)],
            "nvmlDeviceGetUUID": [call("nvmlDeviceGetUUID", h, store=_text)],
            "nvmlDeviceGetEnforcedPowerLimit": [call("nvmlDeviceGetEnforcedPowerLimit", h)],
        }
        for h in handles
    ]
    events = nv.nvmlEventSetCreate()
    for h in handles:
        try:
            nv.nvmlDeviceRegisterEvents(h, XID_EVENT, events)
        except nv.NVMLError:
            pass
    xid_rounds = []
    for _ in range(samples):
        for dev, h in zip(devices, handles):
            for fn, args, store in CALLS:
                dev.setdefault(fn, []).append(call(fn, h, args, store))
        this_round = []
        while True:
            try:
                ev = nv.nvmlEventSetWait_v2(events, 0)
            except nv.NVMLError:
                break
            this_round.append(
                {"device": handles.index(ev.device) if ev.device in handles else None, "eventData": int(ev.eventData)}
            )
        xid_rounds.append(this_round)
        time.sleep(interval_s)
    nv.nvmlShutdown()
    return {
        "about": f"Recorded with probes/nvml_record.py on {len(handles)} GPU(s), {samples} samples.",
        "devices": devices,
        "xid_events": xid_rounds,
    }


def _text(v):
    return v.decode() if isinstance(v, bytes) else v


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=3)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    import pynvml

    try:
        data = record(a.samples, a.interval)
    except pynvml.NVMLError as exc:
        raise SystemExit(f"error: no NVIDIA driver/GPU here (NVML: {exc})") from None
    with open(a.out, "w") as f:
        json.dump(data, f, indent=1)


if __name__ == "__main__":
    main()
