"""report.html and compare.html: one self-contained file each (see reports.html_templates)."""

from __future__ import annotations

import time

import numpy as np

from analyzers.capacity.answer import answer_in
from analyzers.compare import MIN_EFFECT, Comparison
from analyzers.probe_series import ProbeSeries
from analyzers.stats.scaling import series_of
from analyzers.summary import RunSummary
from reports import plots, tables
from reports.answer import build_answer
from reports.capacity_table import CAPACITY_HEADER, CAPACITY_NOTE, capacity_rows
from reports.compare_answer import compare_answer, verdict_matrix
from reports.definitions import DEFINITIONS, OTHER_TOOLS, OTHER_TOOLS_HEADER
from reports.evidence_units import evidence_name, fmt_evidence
from reports.html_templates import environment, hover_script, stylesheet
from reports.prediction_table import HTML_HEADER, html_rows
from reports.prediction_words import band_caption, departure_sentences, offline_line, scope_line, unpredicted_line
from reports.probe_sections import render_probe
from reports.terminal import fmt_ci, fmt_delta, fmt_value, verdict_words
from reports.time_axis import TimeAxis
from rundir import __version__
from rundir.table import RequestTable


def time_axis(
    summary: RunSummary, table: RequestTable, probes: list[ProbeSeries], diagnosis: dict | None = None
) -> TimeAxis:
    """The run's clock: 0 at the run's start, to the last thing anything recorded; the level windows
    and the diagnosis' spike windows on it."""
    info = summary.info
    t_sent = table.df["t_sent"].to_numpy() if len(table) else np.array([])
    t0 = min([info.started] + ([float(np.nanmin(t_sent))] if t_sent.size else []))
    ends = [info.finished or t0]
    if len(table):
        ends.append(float(np.nanmax(table.df[["t_sent", "t_done"]].to_numpy())))
    ends += [float(p.t.max()) for p in probes]
    levels = [
        (lv, w.start - t0, w.end - t0)
        for lv, w in summary.windows.items()
        if w.start is not None and w.end is not None and "/" not in lv
    ]  # levels, not request classes
    spikes = [
        (float(w["start"]) - t0, float(w["end"]) - t0)
        for w in (diagnosis or {}).get("spike_windows") or []
        if isinstance(w, dict) and "start" in w and "end" in w
    ]
    return TimeAxis(t0, (0.0, max(max(ends) - t0, 1.0)), levels, spikes)


# The P99 checklist's order (network, then scheduling, then the host), then any other probe by name.
PROBE_ORDER = ("tcp", "irq", "server", "host", "gpu")


def _probe_rank(p: ProbeSeries) -> tuple[int, str]:
    return (PROBE_ORDER.index(p.name) if p.name in PROBE_ORDER else len(PROBE_ORDER), p.name)


def common_context() -> dict:
    """What every page of ours shares: the stylesheet, the version, the definitions, when it was made."""
    return {
        "css": stylesheet(),
        "script": "",
        "version": __version__,
        "definitions": DEFINITIONS,
        "tools_header": OTHER_TOOLS_HEADER,
        "tools": OTHER_TOOLS,
        "generated": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }


def render_report(
    summary: RunSummary, table: RequestTable, probes: list[ProbeSeries], diagnosis: dict | None = None
) -> str:
    axis = time_axis(summary, table, probes, diagnosis)
    measured = [lv for lv in summary.levels if lv.n_ok]
    scaling_figs = [plots.scaling_figure(group, key) for key, group in series_of(measured).items()]
    capacity = answer_in(summary.info.sweep)
    ctx = {
        **common_context(),
        "script": hover_script(),
        "title": f"llmbench report: {summary.info.run_id}",
        "info": summary.info,
        "slos": summary.slos.describe(),
        "answer": build_answer(summary, diagnosis),
        "capacity_header": CAPACITY_HEADER,
        "capacity_note": CAPACITY_NOTE,
        "capacity_rows": capacity_rows(capacity) if capacity is not None else [],
        "findings": [f for f in summary.finding_groups if f.severity != "benign"],
        "benign": [f for f in summary.finding_groups if f.severity == "benign"],
        "summary_header": tables.SUMMARY_HEADER,
        "varied": any(lv.lengths_vary for lv in summary.levels),
        "summary_rows": tables.summary_rows(summary),
        "class_rows": tables.summary_rows(summary, summary.classes) if summary.classes else [],
        "replica_header": tables.REPLICA_HEADER,
        "replica_rows": tables.replica_rows(summary),
        "detail_header": tables.DETAIL_HEADER,
        "detail_rows": tables.detail_rows(summary),
        "error_rows": tables.error_rows(summary),
        "scaling_header": tables.SCALING_HEADER,
        "scaling_rows": tables.scaling_rows(summary),
        "config": tables.config_rows(summary.info),
        "scaling_figs": scaling_figs,
        "latency_throughput_fig": plots.latency_throughput_figure(measured) if measured else "",
        "cdf_fig": plots.cdf_figure(table, summary) if measured else "",
        "timeline_fig": plots.timeline_figure(table, summary, axis) if len(table) else None,
        "probe_sections": [render_probe(p, axis) for p in sorted(probes, key=_probe_rank)],
        "diagnosis": diagnosis,
        "fmt_evidence": fmt_evidence,
        "evidence_name": evidence_name,
        "length_rows": tables.length_rows(summary),
        "prediction": summary.prediction if summary.prediction is not None and summary.prediction.levels else None,
        "prediction_header": HTML_HEADER,
        "prediction_rows": html_rows(summary.prediction) if summary.prediction else [],
        "prediction_scope": " ".join(
            x
            for x in (
                scope_line(summary.prediction),
                offline_line(summary.prediction),
                unpredicted_line(summary.prediction),
            )
            if x
        )
        if summary.prediction
        else "",
        "prediction_findings": departure_sentences(summary.prediction) if summary.prediction else [],
        "prediction_caption": band_caption(),
        "levels_json": [[name, round(a, 3), round(b, 3)] for name, a, b in axis.levels],
    }
    return environment().get_template("report").render(**ctx)


def render_compare(comparisons: list[Comparison], summaries: list[RunSummary], min_effect: float = MIN_EFFECT) -> str:
    ctx = {
        **common_context(),
        "title": "llmbench comparison: " + " vs ".join(s.info.run_id for s in summaries),
        "comparisons": comparisons,
        "min_effect": min_effect,
        "answers": [compare_answer(c) for c in comparisons],
        "matrices": [verdict_matrix(c) for c in comparisons],
        "configs": [
            (f"{'AB'[min(i, 1)] if len(summaries) == 2 else i}: {s.info.run_id}", tables.config_rows(s.info))
            for i, s in enumerate(summaries)
        ],
        "fmt_value": fmt_value,
        "fmt_delta": fmt_delta,
        "fmt_ci": fmt_ci,
        "verdict_words": verdict_words,
    }
    return environment().get_template("compare").render(**ctx)
