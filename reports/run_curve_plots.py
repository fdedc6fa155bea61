"""The figures of `llmbench report --runs` (analyzers.run_curves computes the points; this draws
them, to inline SVG like every report figure: reports.plots).

- the throughput–latency curves: TTFT P99 and TPOT P95 against output tok/s, one line per run;
- the frontier: output tok/s per replica against per-user output tok/s (1 / TPOT P50), one line
  per run, the way InferenceMAX-style dashboards put deployments side by side: up and to the
  right is better; a run's line goes up and to the left as its load rises.

One colour per run in both figures, and one legend under each with what every run is. A filled
marker is a level that met its run's SLO, a hollow one a level that missed it; a level that is
no measurement (its notes say INVALID: the client fell behind, cut short) is left out.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from analyzers.run_curves import CurvePoint, RunCurve
from reports.plots import STYLE, figure, to_svg

# get_cmap is annotated as returning a Colormap, which has no colors; "tab10" is a ListedColormap of RGB tuples.
_COLORS: tuple[tuple[float, float, float], ...] = plt.get_cmap("tab10").colors  # type: ignore[attr-defined]


def _load_text(curve: RunCurve, p: CurvePoint) -> str:
    return f"{p.load:g}" if curve.closed_loop else f"{p.load:g}/s"


def _draw(a, curve: RunCurve, color, pts: list[tuple[float, float, CurvePoint]], annotate: bool):
    """One run's line, its levels filled (SLO met) or hollow (missed, or no verdict)."""
    (line,) = a.plot([x for x, _, _ in pts], [y for _, y, _ in pts], color=color, linewidth=1.4, label=curve.label)
    for x, y, p in pts:
        a.plot([x], [y], marker="o", markersize=5, color=color, markerfacecolor=color if p.slo_met else "white")
        if annotate:
            a.annotate(
                _load_text(curve, p), (x, y), textcoords="offset points", xytext=(4, 3), fontsize=6.5, color=color
            )
    return line


def _legend(fig, lines) -> None:
    fig.legend(
        lines,
        [ln.get_label() for ln in lines],
        loc="upper left",
        bbox_to_anchor=(0.06, -0.02),
        fontsize=7.5,
        frameon=False,
        title="filled: the level met its run's SLO; hollow: it did not",
        title_fontsize=7.5,
        alignment="left",
    )


def throughput_latency_figure(curves: list[RunCurve]) -> str:
    """TTFT P99 and TPOT P95 (ms) against the whole target's output tok/s, each level annotated with its load."""
    with plt.rc_context(STYLE):
        fig, ax = figure(2, height=3.6)
        lines = []
        for i, curve in enumerate(curves):
            drawn = []
            for a, attr in ((ax[0, 0], "ttft_p99_s"), (ax[0, 1], "tpot_p95_s")):
                pts = [
                    (p.output_tok_s, getattr(p, attr) * 1000, p) for p in curve.plotted if getattr(p, attr) is not None
                ]
                if pts:
                    drawn.append(_draw(a, curve, _COLORS[i % len(_COLORS)], pts, annotate=True))
            lines += drawn[:1]
        ax[0, 0].set(title="TTFT P99 against throughput", xlabel="output tokens/s (whole target)", ylabel="ms")
        ax[0, 1].set(title="TPOT P95 against throughput", xlabel="output tokens/s (whole target)", ylabel="ms")
        _legend(fig, lines)
        return to_svg(fig)


def frontier_figure(curves: list[RunCurve]) -> str:
    """Output tok/s per replica (y) against per-user output tok/s (x), one line per run."""
    with plt.rc_context(STYLE):
        fig, ax = figure(1, width=9.5, height=4.6)
        a = ax[0, 0]
        lines, xs, ys = [], [1e-9], [1e-9]
        for i, curve in enumerate(curves):
            pts = [(p.per_user_tok_s, p.per_replica_tok_s, p) for p in curve.plotted if p.per_user_tok_s is not None]
            if pts:
                lines.append(_draw(a, curve, _COLORS[i % len(_COLORS)], pts, annotate=True))
                xs += [x for x, _, _ in pts]
                ys += [y for _, y, _ in pts]
        a.set(
            title="throughput per replica against per-user speed (up and to the right is better)",
            xlabel="per-user output tokens/s (1 / TPOT P50)",
            ylabel="output tokens/s per replica",
        )
        a.set_xlim(0, max(xs) * 1.12)  # from zero, with room for the load labels
        a.set_ylim(0, max(ys) * 1.12)
        _legend(fig, lines)
        return to_svg(fig)
