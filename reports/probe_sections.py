"""Report sections for probe time series: curated panels first, constants in a small table, every
other field behind a collapsed "all fields" part.

A probe with curated panels (reports.probe_panels: server, tcp, irq, host, gpu) gets those,
with units and names a person knows. Any other probe, or the fields a curated set does not
show, goes through the generic renderer: every numeric field over time, one panel per
top-level field. All panels share the run's time axis with the per-request timeline (level
windows marked, the P99 diagnosis' spike windows shaded), so a spike in one lines up with a
spike in the other. A missing or empty probe file adds nothing and is not an error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analyzers.probe_series import ProbeSeries
from reports import plots
from reports.probe_panels import curated
from reports.time_axis import TimeAxis, TimeFigure

MAX_PANELS = 10
MAX_LINES_PER_PANEL = 8


@dataclass
class Section:
    title: str
    intro: str  # plain text; the template escapes it
    figures: list[TimeFigure] = field(default_factory=list)
    text_fields: dict[str, list[str]] = field(default_factory=dict)
    constants: dict[str, str] = field(default_factory=dict)  # numeric fields that never changed
    omitted: list[str] = field(default_factory=list)  # what was not drawn, in words
    all_fields: list[TimeFigure] = field(default_factory=list)  # collapsed: the fields not curated
    all_constants: dict[str, str] = field(default_factory=dict)  # collapsed: per-index constants


INTROS = {
    "server": (
        "server metrics",
        "The server's own /metrics (vLLM names): KV-cache usage, running and waiting "
        "requests, preemptions, prefix-cache hits. Waiting requests and preemptions that rise with latency "
        "point at scheduling.",
    ),
    "tcp": (
        "network: TCP",
        "Retransmits and RTT of the target's own connections, then host-wide counters as "
        "context. The P99 checklist starts here: retransmits that line up with latency spikes point at the "
        "network before scheduling or the host.",
    ),
    "irq": (
        "network: NIC interrupts",
        "Interrupts per core. A NIC whose interrupts all land on one core can cap "
        "throughput and add tail latency (the seed's 40→120 ms TPOT case).",
    ),
    "host": (
        "host: CPU and memory",
        "CPU per core and per process (server, load-generator client, everything "
        "else), and memory. A busy core or a client short of CPU shows here.",
    ),
    "gpu": ("GPU", "Utilization, memory, power, clocks and throttle reasons per GPU (NVML)."),
}


def render_probe(series: ProbeSeries, axis: TimeAxis) -> Section:
    panels = curated(series)
    if panels is None:
        return generic_section(series, axis)
    title, intro = INTROS.get(series.name, (f"probe: {series.name}", ""))
    section = Section(
        title, f"{intro} {len(series)} samples of probes/{series.name}.jsonl.", text_fields=dict(series.text)
    )
    drawn = {}
    for name, lines in panels.panels.items():  # a panel whose every line is flat is a constant
        flat = {k: _constant(v) for k, v in lines.items()}
        if all(c is not None for c in flat.values()):
            for k, c in flat.items():
                section.constants[name if k == name or len(flat) == 1 else f"{name}: {k}"] = f"{c:g}"
        else:
            drawn[name] = lines
    if drawn:
        section.figures.append(plots.series_figure(series.t - axis.t0, drawn, title, axis))
    rest = {k: v for k, v in series.numeric.items() if k not in panels.used}
    for key, values in series.numeric.items():
        const = _constant(values)
        if const is not None:
            if key not in panels.used:  # shown by a panel (or its constant) already
                target = section.all_constants if "." in key else section.constants
                target[key] = _fmt_const(key, const)
            rest.pop(key, None)
    generic = ProbeSeries(series.name, series.t, rest)
    section.all_fields, section.omitted = _generic_figures(generic, axis, f"{title}: all other fields")
    return section


def _constant(values: np.ndarray) -> float | None:
    finite = values[~np.isnan(values)]
    return float(finite[0]) if finite.size and finite.min() == finite.max() else None


def _fmt_const(key: str, v: float) -> str:
    if key.endswith("_bytes") and v >= 2**20:
        return f"{v / 2**30:.2f} GiB"
    return f"{v:g}"


def generic_section(series: ProbeSeries, axis: TimeAxis, title: str | None = None, intro: str | None = None) -> Section:
    section = Section(
        title or f"probe: {series.name}",
        intro
        or f"{len(series)} samples of probes/{series.name}.jsonl; every numeric field over "
        "time, on the timeline's clock.",
        text_fields=dict(series.text),
    )
    for key, values in series.numeric.items():
        const = _constant(values)
        if const is not None:  # a constant says one thing: print it, don't plot it
            section.constants[key] = _fmt_const(key, const)
    section.figures, section.omitted = _generic_figures(series, axis, section.title)
    return section


def _generic_figures(series: ProbeSeries, axis: TimeAxis, title: str) -> tuple[list[TimeFigure], list[str]]:
    groups: dict[str, list[str]] = {}
    omitted: list[str] = []
    for key, values in series.numeric.items():
        if _constant(values) is None and np.isfinite(values).any():
            groups.setdefault(key.split(".")[0], []).append(key)
    panels: dict[str, dict[str, np.ndarray]] = {}
    for group, keys in groups.items():
        if len(panels) == MAX_PANELS:
            rest = [g for g in groups if g not in panels]
            omitted.append(f"{len(rest)} more field groups: {', '.join(rest[:10])}")
            break
        if len(keys) > MAX_LINES_PER_PANEL:
            omitted.append(f"{group}: {len(keys) - MAX_LINES_PER_PANEL} of {len(keys)} fields not drawn")
        panels[group] = {k[len(group) + 1 :] or k: series.numeric[k] for k in keys[:MAX_LINES_PER_PANEL]}
    if not panels:
        return [], omitted
    return [plots.series_figure(series.t - axis.t0, panels, title, axis)], omitted
