"""Report sections for probe time series: a registry keyed by probe name, with a generic fallback.

A probe adds a section to the report without touching the rest of it: the report renders every
probes/<name>.jsonl it finds through `render_probe`, which uses the renderer registered for that
name (`@section_for("tcp")`) or, for any other probe, the generic one: every numeric field over
time, one panel per top-level field, full width on the same time axis as the per-request
latency timeline, so a spike in one lines up with a spike in the other. Fields that never
change are printed, not plotted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from analyzers.probe_series import ProbeSeries
from reports import plots

MAX_PANELS = 10
MAX_LINES_PER_PANEL = 8


@dataclass
class Section:
    title: str
    intro: str                                   # plain text; the template escapes it
    figures: list[str] = field(default_factory=list)          # inline SVG from reports.plots
    text_fields: dict[str, list[str]] = field(default_factory=dict)
    constants: dict[str, str] = field(default_factory=dict)   # numeric fields that never changed
    omitted: list[str] = field(default_factory=list)          # what was not drawn, in words


@dataclass
class TimeAxis:
    t0: float                                    # the run's start, epoch seconds
    xlim: tuple[float, float]                    # seconds since t0, shared with the timeline


Renderer = Callable[[ProbeSeries, TimeAxis], Section]
RENDERERS: dict[str, Renderer] = {}


def section_for(name: str) -> Callable[[Renderer], Renderer]:
    def register(fn: Renderer) -> Renderer:
        RENDERERS[name] = fn
        return fn
    return register


def render_probe(series: ProbeSeries, axis: TimeAxis) -> Section:
    return RENDERERS.get(series.name, generic_section)(series, axis)


def generic_section(series: ProbeSeries, axis: TimeAxis, title: str | None = None, intro: str | None = None) -> Section:
    section = Section(title or f"probe: {series.name}",
                      intro or f"{len(series)} samples of probes/{series.name}.jsonl; every numeric field over "
                               "time, on the timeline's clock.", text_fields=dict(series.text))
    groups: dict[str, list[str]] = {}
    for key, values in series.numeric.items():
        finite = values[~np.isnan(values)]
        if finite.size == 0:
            continue
        if finite.min() == finite.max():      # a constant says one thing: print it, don't plot it
            section.constants[key] = f"{finite[0]:g}"
            continue
        groups.setdefault(key.split(".")[0], []).append(key)
    panels: dict[str, dict[str, np.ndarray]] = {}
    for group, keys in groups.items():
        if len(panels) == MAX_PANELS:
            rest = [g for g in groups if g not in panels]
            section.omitted.append(f"{len(rest)} more field groups: {', '.join(rest[:10])}")
            break
        if len(keys) > MAX_LINES_PER_PANEL:
            section.omitted.append(f"{group}: {len(keys) - MAX_LINES_PER_PANEL} of {len(keys)} fields not drawn")
        panels[group] = {k[len(group) + 1:] or k: series.numeric[k] for k in keys[:MAX_LINES_PER_PANEL]}
    if panels:
        section.figures.append(plots.series_figure(series.t - axis.t0, panels, section.title, axis.xlim))
    return section


@section_for("tcp")
def tcp_section(series: ProbeSeries, axis: TimeAxis) -> Section:
    return generic_section(series, axis, "network: TCP", "Retransmits and drops on the run's clock. The P99 "
                           "checklist starts here: retransmits that line up with latency spikes point at the "
                           "network before scheduling or the host.")


@section_for("irq")
def irq_section(series: ProbeSeries, axis: TimeAxis) -> Section:
    return generic_section(series, axis, "network: NIC interrupts", "Interrupts per CPU. A NIC whose interrupts "
                           "all land on one core can cap throughput and add tail latency (the seed's 40→120 ms "
                           "TPOT case).")


@section_for("server")
def server_section(series: ProbeSeries, axis: TimeAxis) -> Section:
    return generic_section(series, axis, "server metrics", "The server's /metrics (vLLM names): running and "
                           "waiting requests, KV-cache usage, preemptions. Waiting requests and preemptions "
                           "that rise with latency point at scheduling.")
