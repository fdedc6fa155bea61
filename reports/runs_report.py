"""runs.html, `llmbench report --runs A B C`: several runs' curves in one self-contained file
(analyzers.run_curves computes them; reports.run_curve_plots draws them; docs/reports.md,
"Runs together")."""

from __future__ import annotations

from analyzers.run_curves import CurvePoint, RunCurve
from reports import run_curve_plots
from reports.html import common_context
from reports.html_templates import environment

RUNS_HEADER = [
    "#",
    "run",
    "model",
    "workload",
    "series",
    "replicas",
    "status",
    "levels",
    "peak output tok/s",
    "per replica",
    "per-user tok/s there",
]
POINTS_HEADER = [
    "#",
    "run",
    "level",
    "load",
    "output tok/s",
    "per replica",
    "per-user tok/s",
    "TTFT P99 ms",
    "TPOT P95 ms",
    "SLO verdict",
]


def _num(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v * 1000:,.0f}" if v >= 0.1 else f"{v * 1000:,.1f}"


def _verdict(p: CurvePoint) -> str:
    if p.invalid is not None:  # the why in short; the run's own report has the whole sentence
        return f"not plotted: {p.invalid.split(' (')[0]}"
    return "no verdict" if p.slo_met is None else "met" if p.slo_met else "missed"


def runs_rows(curves: list[RunCurve]) -> list[list[str]]:
    rows = []
    for i, c in enumerate(curves, 1):
        left_out = len(c.points) - len(c.plotted)
        levels = f"{len(c.plotted)}" + (f" (+{left_out} not a measurement)" if left_out else "")
        peak = max(c.plotted, key=lambda p: p.output_tok_s, default=None)
        rows.append(
            [
                str(i),
                c.run_id,
                c.model,
                c.workload,
                c.series,
                str(c.replicas),
                c.status,
                levels,
                *(
                    (_num(peak.output_tok_s), _num(peak.per_replica_tok_s), _num(peak.per_user_tok_s))
                    if peak
                    else ("—", "—", "—")
                ),
            ]
        )
    return rows


def points_rows(curves: list[RunCurve]) -> list[list[str]]:
    return [
        [
            str(i),
            c.run_id,
            p.level_id,
            f"{p.load:g}" if c.closed_loop else f"{p.load:g}/s",
            _num(p.output_tok_s),
            _num(p.per_replica_tok_s),
            _num(p.per_user_tok_s),
            _ms(p.ttft_p99_s),
            _ms(p.tpot_p95_s),
            _verdict(p),
        ]
        for i, c in enumerate(curves, 1)
        for p in c.points
    ]


def render_runs(curves: list[RunCurve], n_runs: int, skipped: list[str]) -> str:
    """The page; `skipped`: the runs with no level to plot (named, not dropped silently)."""
    ctx = {
        **common_context(),
        "title": f"llmbench: {n_runs} runs",
        "curves": curves,
        "n_runs": n_runs,
        "skipped": skipped,
        "runs_header": RUNS_HEADER,
        "runs_rows": runs_rows(curves),
        "points_header": POINTS_HEADER,
        "points_rows": points_rows(curves),
        "latency_fig": run_curve_plots.throughput_latency_figure(curves) if curves else "",
        "frontier_fig": run_curve_plots.frontier_figure(curves) if curves else "",
    }
    return environment().get_template("runs").render(**ctx)
