"""The report's figures, rendered with matplotlib's Agg backend to inline SVG.

Each function returns an SVG string (no XML prolog, no DOCTYPE, nothing fetched) that the HTML
embeds as is. Text is kept as text (`svg.fonttype: none`), which makes files small and lets the
browser's fonts draw it; every figure gets its own id salt so that the element ids of several
SVGs in one page never collide. Scatter plots of big runs are drawn from a fixed random sample
(MAX_POINTS), CDFs from MAX_CDF_POINTS quantiles, so a report stays a few hundred KB.
"""

from __future__ import annotations

import io
import itertools
import re
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from analyzers.stats.latency import LevelStats
from analyzers.summary import RunSummary
from reports.terminal import load_label
from reports.time_axis import AXES_LEFT, AXES_RIGHT, MAX_HOVER_POINTS, TimeAxis, TimeFigure
from rundir.table import RequestTable

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType  # matplotlib >= 3.9: rc_context's key type

MAX_POINTS = 4000
MAX_CDF_POINTS = 400
_salt = itertools.count()
STYLE: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.dpi": 96,
}


def to_svg(fig, tight: bool = True) -> str:
    buf = io.StringIO()
    with plt.rc_context({"svg.hashsalt": f"fig{next(_salt)}"}):
        fig.savefig(buf, format="svg", bbox_inches="tight" if tight else None, metadata={"Date": None, "Creator": None})
    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]  # drop the XML prolog and DOCTYPE
    return re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)


def figure(ncols: int = 1, nrows: int = 1, width: float = 9.5, height: float = 3.0, **kw):
    with plt.rc_context(STYLE):
        return plt.subplots(nrows, ncols, figsize=(width, height * nrows), squeeze=False, **kw)


def scaling_figure(levels: list[LevelStats], series_key: str) -> str:
    """Throughput and latency percentiles against load, for one series (same lengths)."""
    with plt.rc_context(STYLE):
        fig, ax = figure(3)
        x = [lv.load for lv in levels]
        xlabel = "concurrency" if levels[0].concurrency is not None else "request rate (req/s)"
        tput = [lv.output_tok_s for lv in levels]
        err = np.array(
            [
                [t - (lv.output_tok_s_ci or [t, t])[0], (lv.output_tok_s_ci or [t, t])[1] - t]
                for t, lv in zip(tput, levels)
            ]
        ).T
        ax[0, 0].errorbar(x, tput, yerr=np.clip(err, 0, None), marker="o", capsize=3)
        ax[0, 0].set(title="output tokens/s (95% CI)", xlabel=xlabel)
        for a, metric, qs in ((ax[0, 1], "ttft", ("p50", "p95", "p99")), (ax[0, 2], "tpot", ("p50", "p95", "p99"))):
            for q in qs:
                ys = [_ms(getattr(lv, metric).p[q]) for lv in levels]
                a.plot(x, ys, marker="o", label=q.upper())
            a.set(title=f"{metric.upper()} (ms)", xlabel=xlabel)
            a.legend(fontsize=7)
        for a in ax[0]:
            if len(x) > 1 and min(x) > 0 and max(x) / min(x) >= 8:
                a.set_xscale("log", base=2)
        fig.suptitle(series_key, fontsize=9, y=1.06)
        return to_svg(fig)


def latency_throughput_figure(levels: list[LevelStats]) -> str:
    """The latency–throughput curve: what each extra token/s costs in tail latency."""
    with plt.rc_context(STYLE):
        fig, ax = figure(2)
        for a, metric, q, title in (
            (ax[0, 0], "ttft", "p99", "TTFT P99 (ms)"),
            (ax[0, 1], "tpot", "p95", "TPOT P95 (ms)"),
        ):
            pts = [(lv.output_tok_s, _ms(getattr(lv, metric).p[q]), load_label(lv)) for lv in levels]
            pts = [p for p in pts if p[1] is not None]
            if pts:
                a.plot([p[0] for p in pts], [p[1] for p in pts], marker="o")
                for xv, yv, label in pts:
                    a.annotate(label, (xv, yv), textcoords="offset points", xytext=(4, 4), fontsize=7)
            a.set(xlabel="output tokens/s", title=title)
        return to_svg(fig)


def cdf_figure(table: RequestTable, summary: RunSummary) -> str:
    """TTFT and TPOT CDFs, one line per level (requests sent in the measured window, status ok)."""
    df = table.df
    good = df["in_window"].to_numpy() & (df["status"].to_numpy() == "ok")
    rows = table.level_rows()
    with plt.rc_context(STYLE):
        fig, ax = figure(2)
        for lv in summary.levels:
            mask = np.zeros(len(df), dtype=bool)
            mask[rows[lv.level_id]] = True
            mask &= good
            for a, col in ((ax[0, 0], "ttft_s"), (ax[0, 1], "tpot_s")):
                v = df[col].to_numpy()[mask]
                v = np.sort(v[~np.isnan(v)])
                if v.size:
                    q = np.linspace(0, 1, min(v.size, MAX_CDF_POINTS))
                    a.plot(np.quantile(v, q) * 1000, q, label=lv.level_id, drawstyle="steps-post")
        ax[0, 0].set(title="TTFT CDF", xlabel="ms", ylabel="fraction of requests")
        ax[0, 1].set(title="TPOT CDF", xlabel="ms")
        for a in ax[0]:
            if a.lines:
                a.legend(fontsize=7)
        return to_svg(fig)


def mark_time(ax_list, axis: TimeAxis, label_levels: bool = True) -> None:
    """The level windows (a thin line at each edge, the level named on the first panel) and the spike
    windows (shaded red) on every panel of a time-axis figure."""
    for i, a in enumerate(ax_list):
        for name, start, end in axis.levels:
            for x in (start, end):
                a.axvline(
                    x, color="#8a93a6", linewidth=0.6, linestyle=(0, (3, 3)), zorder=0, gid=f"level-edge-{next(_salt)}"
                )
            if label_levels and i == 0:
                a.text(
                    (start + end) / 2,
                    1.0,
                    name,
                    transform=a.get_xaxis_transform(),
                    ha="center",
                    va="bottom",
                    fontsize=6.5,
                    color="#4a5163",
                    clip_on=False,
                )
        for start, end in axis.spikes:
            a.axvspan(
                start,
                max(end, start + (axis.xlim[1] - axis.xlim[0]) / 1500),
                color="tab:red",
                alpha=0.18,
                linewidth=0,
                zorder=0,
                gid=f"spike-window-{next(_salt)}",
            )  # the report's tests find these


def _hover(fig, axes, t: np.ndarray, panels: list[tuple[str, dict[str, np.ndarray]]], axis: TimeAxis) -> dict:
    """What the report's inline script needs to show values under the cursor (reports.time_axis)."""
    idx = np.arange(t.size)
    if t.size > MAX_HOVER_POINTS:
        idx = np.linspace(0, t.size - 1, MAX_HOVER_POINTS).round().astype(int)
    hover_panels: list[dict] = []
    out = {
        "x0": axis.xlim[0],
        "x1": axis.xlim[1],
        "l": AXES_LEFT,
        "r": AXES_RIGHT,
        "t": [round(float(x), 3) for x in t[idx]],
        "panels": hover_panels,
    }
    for a, (title, lines) in zip(axes, panels):
        box = a.get_position()
        hover_panels.append(
            {
                "title": title,
                "y0": round(box.y0, 4),
                "y1": round(box.y1, 4),
                "lines": {
                    k: [None if not np.isfinite(v) else float(f"{v:.4g}") for v in np.asarray(vals, float)[idx]]
                    for k, vals in lines.items()
                },
            }
        )
    return out


def timeline_figure(table: RequestTable, summary: RunSummary, axis: TimeAxis) -> TimeFigure:
    """Every request on the run's clock: TTFT and E2E by send time, failures marked, windows shaded."""
    df = table.df
    t0, xlim = axis.t0, axis.xlim
    rng = np.random.default_rng(0)
    idx = np.arange(len(df))
    if idx.size > MAX_POINTS:
        idx = np.sort(rng.choice(idx, MAX_POINTS, replace=False))
    sent = df["t_sent"].to_numpy()[idx] - t0
    status = df["status"].to_numpy()[idx]
    with plt.rc_context(STYLE):
        fig, ax = figure(1, 2, height=2.4, sharex=True)
        ok = status == "ok"
        for a, col, title in (
            (ax[0, 0], "ttft_s", "TTFT (s) by send time"),
            (ax[1, 0], "e2e_s", "E2E (s) by send time"),
        ):
            y = df[col].to_numpy()[idx]
            # Rasterized (a PNG inside the SVG): thousands of points stay a few tens of KB.
            a.scatter(sent[ok], y[ok], s=4, alpha=0.5, label="ok", rasterized=True)
            bad = ~ok
            if bad.any():
                a.scatter(sent[bad], np.nan_to_num(y[bad], nan=0.0), s=14, marker="x", color="red", label="failed")
                a.legend(fontsize=7)
            a.set_title(title, fontsize=9, loc="left")
            for w in summary.windows.values():
                if w.start is not None and w.end is not None:
                    a.axvspan(w.start - t0, w.end - t0, color="tab:green", alpha=0.07)
        mark_time(ax[:, 0], axis)
        ax[1, 0].set(xlabel="seconds since the run started", xlim=xlim)
        note = f" (a random {MAX_POINTS} of {len(df)})" if len(df) > MAX_POINTS else ""
        spikes = "; red: the P99 diagnosis' spike windows" if axis.spikes else ""
        fig.suptitle("per-request timeline; green: measured windows" + spikes + note, fontsize=9, y=0.995)
        # The same width and horizontal margins as the probes' panels (series_figure), so that a
        # second on this x axis is the same pixel column in every probe section below it.
        fig.subplots_adjust(left=AXES_LEFT, right=AXES_RIGHT, top=0.84, bottom=0.12, hspace=0.45)
        hover = _hover(fig, ax[:, 0], np.array([]), [], axis)
        return TimeFigure(to_svg(fig, tight=False), hover)


def series_figure(t: np.ndarray, panels: dict[str, dict[str, np.ndarray]], title: str, axis: TimeAxis) -> TimeFigure:
    """Stacked full-width panels of time series on the run's clock: panel title -> {line label -> values}.
    Full width, so the x axis lines up with the timeline's. Laid out by hand and with 3 y ticks: the
    "tight" layout pass and tick labels are most of the cost of a dozen panels."""
    from matplotlib.ticker import MaxNLocator

    with plt.rc_context(STYLE):
        height = 1.15 * len(panels) + 0.7
        fig, ax = figure(1, len(panels), height=height / len(panels), sharex=True)
        for a, (name, lines) in zip(ax[:, 0], panels.items()):
            for label, values in lines.items():
                a.plot(t, values, label=label, linewidth=1)
            a.set_title(name, fontsize=8, loc="left", pad=9 if a is ax[0, 0] and axis.levels else 2)
            a.yaxis.set_major_locator(MaxNLocator(3))
            if len(lines) > 1 or next(iter(lines)) != name:
                a.legend(fontsize=6, ncol=min(4, len(lines)), loc="upper right")
        mark_time(ax[:, 0], axis)
        ax[-1, 0].set(xlim=axis.xlim, xlabel="seconds since the run started")
        fig.subplots_adjust(left=AXES_LEFT, right=AXES_RIGHT, top=1 - 0.45 / height, bottom=0.45 / height, hspace=0.7)
        fig.suptitle(title, fontsize=9, y=1 - 0.06 / height)
        hover = _hover(fig, ax[:, 0], t, list(panels.items()), axis)
        return TimeFigure(to_svg(fig, tight=False), hover)


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1000
