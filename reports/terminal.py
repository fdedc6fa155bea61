"""Terminal tables (rich): the sweep's summary in the shape of the seed's case study
(concurrency | input len | throughput | TTFT P50/P99 | TPOT P50/P95 | E2E P99 | req/s | errors |
SLO | note), and the A/B comparison, as grids (reports/grid.py: a table that fits, or a block per
row). Run-supplied text is never markup: grid cells and answer lines are plain text."""

from __future__ import annotations

import math

from rich.console import Console
from rich.text import Text

from analyzers.compare import Comparison
from analyzers.stats.latency import LevelStats
from analyzers.summary import RunSummary
from reports.grid import Column, Grid, print_hanging


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v * 1000:.0f}"


def load_label(lv: LevelStats) -> str:
    return str(lv.concurrency) if lv.concurrency is not None else f"{lv.request_rate:g}/s"


def tok_s_text(lv: LevelStats, ci: str = "") -> str:
    """A level's output tok/s as a row shows it: none for a level that measured nothing (no request
    was sent in its window, so the tokens that arrived there came from the warm-up cohort alone, in
    lock step, and are not the level's steady throughput)."""
    if lv.n_in_window == 0:
        return "—"
    return f"{lv.output_tok_s:.1f}" + (f" ({ci})" if ci else "")


def lengths(lv: LevelStats) -> tuple[str, str]:
    """The prompt and output lengths a row shows: the target, or "~mean" measured where the workload
    varies them (a ShareGPT run's target is 0) or the server did not honour the target."""
    if not lv.lengths_vary:
        return str(lv.input_len), str(lv.output_len)

    def one(mean, target):
        return f"~{mean:.0f}" if mean is not None else str(target)

    return one(lv.prompt_tokens_mean, lv.input_len), one(lv.output_tokens_mean, lv.output_len)


# Notes abbreviated in the narrow layout (with a legend), so that a note stays one whole word or two.
SHORT_NOTES = {
    "over SLO (no successful requests)": "over, 0 ok",
    "nothing measured": "none",
    "at target · near ceiling": "target, ceil",
    "over SLO · near ceiling": "over, ceil",
    "over SLO · window < request": "over, no rate",
    "normal · window < request": "no rate",
    "at target · window < request": "target, no rate",
    "near ceiling": "ceiling",
    "at target": "target",
    "over SLO": "over",
    "normal": "normal",
}
CAPTION = (
    "* P99 from fewer than 100 samples. Percentiles over requests sent in each level's measured window; "
    "tok/s and req/s over what arrived in it"
)


def summary_table(levels: list[LevelStats], notes: dict[str, str], title: str = "sweep summary") -> list[Grid]:
    """The seed's table, in two layouts for reports.grid: the full one, and a narrow one that leaves
    goodput and the request counts to the report and abbreviates the notes; below the narrow one's
    width each level is a block of the full one's fields."""
    return [_summary_layout(levels, notes, title, compact=False), _summary_layout(levels, notes, title, compact=True)]


def _summary_layout(levels: list[LevelStats], notes: dict[str, str], title: str, compact: bool) -> Grid:
    load_header = "concurrency" if all(lv.concurrency is not None for lv in levels) else "load"
    shown = {
        lv.level_id: (
            SHORT_NOTES.get(notes.get(lv.level_id, ""), notes.get(lv.level_id, ""))
            if compact
            else notes.get(lv.level_id, "")
        )
        for lv in levels
    }
    names = [
        load_header if not compact else load_header[:4],
        "in/out\nlen",
        "output\ntok/s",
        "TTFT ms\nP50/P99",
        "TPOT ms\nP50/P95",
        "E2E\nP99 s",
        "req/s",
    ]
    if not compact:
        names += ["goodput", "n (ok)"]
    names += ["errors" if not compact else "err\n%", "SLO"]
    columns = [Column(n, "right") for n in names[:-1]] + [Column("SLO", "center"), Column("note")]
    grid = Grid(title, columns, dense=compact, box_optional=True)
    for lv in levels:
        errors = lv.n_error + lv.n_timeout
        slo = {
            True: Text("met", style="green"),
            False: Text("miss" if compact else "missed", style="red"),
            None: Text("—"),
        }[lv.slo_met]
        ttft = f"{_ms(lv.ttft.p['p50'])}/{_ms(lv.ttft.p['p99'])}" + (
            "*" if lv.ttft.n and not lv.ttft.p99_reliable else ""
        )
        e2e = "—" if lv.e2e.p["p99"] is None else f"{lv.e2e.p['p99']:.2f}"
        row: list[str | Text] = [
            load_label(lv),
            "/".join(lengths(lv)),
            tok_s_text(lv),
            ttft,
            f"{_ms(lv.tpot.p['p50'])}/{_ms(lv.tpot.p['p95'])}",
            e2e,
            f"{lv.req_s:.2f}",
        ]
        if not compact:
            row += [f"{lv.goodput_req_s:.2f}", f"{lv.n_in_window} ({lv.n_ok})"]
        err = (f"{lv.error_rate:.0%}" if compact else f"{errors} ({lv.error_rate:.0%})") if errors else "0"
        row += [Text(err, style="red" if errors else ""), slo, shown[lv.level_id]]
        grid.add_row(*row)
    grid.caption = (
        CAPTION
        + ("; goodput and counts: see the report." if compact else "; goodput = requests/s that met every SLO.")
        + _legend(levels, shown, compact)
    )
    return grid


def _legend(levels: list[LevelStats], shown: dict[str, str], compact: bool) -> str:
    long_of = {short: long for long, short in SHORT_NOTES.items() if short != long}
    legend = "; ".join(f"{n} = {long_of[n]}" for n in dict.fromkeys(shown.values()) if n in long_of)
    if compact and any(lv.slo_met is False for lv in levels):
        legend = "; ".join(x for x in ("miss = missed the SLO", legend) if x)
    if any(lv.lengths_vary for lv in levels):
        legend = "; ".join(x for x in ("~ = mean measured tokens (the workload varies them)", legend) if x)
    return f" {legend}." if legend else ""


def run_summary_table(summary: RunSummary, title: str | None = None) -> list[Grid]:
    notes = {lv.level_id: summary.note(lv.level_id) for lv in summary.levels}
    return summary_table(summary.levels, notes, title=title or f"run {summary.info.run_id}")


def answer_lines(items) -> list[Text]:
    """The answer block (reports.answer) as lines of text (run text is never markup)."""
    colour = {"good": "green", "bad": "red", "warn": "yellow", "neutral": "bold"}
    out = []
    for a in items:
        out.append(Text.assemble((f"{a.label}:", colour.get(a.tone, "bold")), f" {a.text}"))
        out += [Text(f"    · {e}") for e in a.evidence]
    return out


def print_answer(console: Console, items) -> None:
    """The answer block, each line wrapped between words under its own start."""
    for line in answer_lines(items):
        indent = len(line.plain) - len(line.plain.lstrip())
        print_hanging(console, line[indent:], indent=indent, hang=2)


def compare_table(c: Comparison) -> list[Grid]:
    """Two layouts for reports.grid: with the intervals, and a narrower one that leaves them to
    compare.html (the verdict already says whether the change is beyond noise)."""
    return [_compare_layout(c, with_ci=True), _compare_layout(c, with_ci=False)]


def _compare_layout(c: Comparison, with_ci: bool) -> Grid:
    columns = (
        [
            Column("level", group=True),
            Column("metric"),
            Column("A", "right"),
            Column("B", "right"),
            Column("B − A", "right"),
        ]
        + ([Column("95% CI of B − A", "right")] if with_ci else [])
        + [Column("verdict")]
    )
    grid = Grid(
        f"A = {c.run_a}   B = {c.run_b}",
        columns,
        dense=not with_ci,
        box_optional=True,
        caption="" if with_ci else "95% intervals of B − A: compare.html.",
    )
    colour = {"better": "green", "worse": "red", "within noise": "dim", "n/a": "dim"}
    for lc in c.levels:
        for d in lc.deltas:
            ci = [fmt_ci(d.metric, d.ci)] if with_ci else []
            grid.add_row(
                lc.level_id,
                d.metric,
                fmt_value(d.metric, d.a),
                fmt_value(d.metric, d.b),
                fmt_delta(d),
                *ci,
                Text(verdict_words(d), style=colour[d.verdict]),
            )
    return grid


def verdict_words(d) -> str:
    """The verdict, and why it has no size when it has none (a percentile reached failed requests)."""
    return f"{d.verdict} ({d.note})" if d.note else d.verdict


def fmt_value(metric: str, v: float | None) -> str:
    """Latencies in ms, rates as they are, error rate in %; a percentile that reached failed requests
    (docs/metrics.md: their latency is unbounded) is "unbounded", never "inf ms"."""
    if v is None:
        return "—"
    if math.isinf(v):
        return "unbounded"
    if metric == "error rate":
        return f"{v:.2%}"
    if "/s" in metric:
        return f"{v:.2f}"
    return f"{v * 1000:.1f} ms"


def fmt_delta(d) -> str:
    if d.delta is None:
        return "—"
    rel = f" ({d.rel:+.1%})" if d.rel is not None else ""
    sign = "+" if d.delta >= 0 else "−"
    return sign + fmt_value(d.metric, abs(d.delta)) + rel


def fmt_ci(metric: str, ci: list[float] | None) -> str:
    if not ci:
        return "—"

    def one(x):
        return ("−" if x < 0 else "") + fmt_value(metric, abs(x))

    return f"[{one(ci[0])}, {one(ci[1])}]"
