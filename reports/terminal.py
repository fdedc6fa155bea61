"""Terminal tables (rich): the sweep's summary in the shape of the seed's case study
(concurrency | input len | throughput | TTFT P50/P99 | TPOT P50/P95 | E2E P99 | req/s | errors |
SLO | note), and the A/B comparison. Run-supplied text goes through `escape` so a level id or
error string cannot inject rich markup."""

from __future__ import annotations

import math

from rich import box
from rich.markup import escape
from rich.table import Table

from analyzers.compare import Comparison
from analyzers.stats.latency import LevelStats
from analyzers.summary import RunSummary


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


COMPACT_BELOW = 110     # terminal columns under which the table drops what the report already shows
# Notes abbreviated on a narrow terminal (with a legend), so that no cell is cut mid-word.
SHORT_NOTES = {"over SLO (no successful requests)": "over, 0 ok", "nothing measured": "none",
               "at target · near ceiling": "target, ceil", "over SLO · near ceiling": "over, ceil",
               "near ceiling": "ceiling", "at target": "target", "over SLO": "over", "normal": "normal"}


def summary_table(levels: list[LevelStats], notes: dict[str, str], title: str = "sweep summary",
                  width: int | None = None) -> Table:
    """The seed's table. On a terminal narrower than COMPACT_BELOW columns, goodput and the request
    counts are left to the report and headers go on two lines, so the numbers are never cut."""
    compact = width is not None and width < COMPACT_BELOW
    load_header = "concurrency" if all(lv.concurrency is not None for lv in levels) else "load"
    shown = {lv.level_id: (SHORT_NOTES.get(notes.get(lv.level_id, ""), notes.get(lv.level_id, "")) if compact
                           else notes.get(lv.level_id, "")) for lv in levels}
    t = Table(title=escape(title), title_justify="left", caption_justify="left",
              box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
              pad_edge=not compact, padding=(0, 0) if compact else (0, 1))   # SIMPLE_HEAD spaces the columns
    columns = [(load_header if not compact else load_header[:4], "right"), ("in/out\nlen", "right"),
               ("output\ntok/s", "right"), ("TTFT ms\nP50/P99", "right"), ("TPOT ms\nP50/P95", "right"),
               ("E2E\nP99 s", "right"), ("req/s", "right")]
    if not compact:
        columns += [("goodput", "right"), ("n (ok)", "right")]
    columns += [("errors" if not compact else "err\n%", "right"), ("SLO", "center"), ("note", "left")]
    for name, justify in columns:
        width_of_note = max([len(n) for n in shown.values()] + [4]) if compact else None
        t.add_column(name, justify=justify, no_wrap=True if compact else name != "note", overflow="fold",
                     min_width=width_of_note if name == "note" else None)
    for lv in levels:
        errors = lv.n_error + lv.n_timeout
        slo = {True: "[green]met[/]", False: "[red]miss[/]" if compact else "[red]missed[/]", None: "—"}[lv.slo_met]
        ttft = f"{_ms(lv.ttft.p['p50'])}/{_ms(lv.ttft.p['p99'])}" + ("*" if lv.ttft.n and not lv.ttft.p99_reliable else "")
        e2e = "—" if lv.e2e.p["p99"] is None else f"{lv.e2e.p['p99']:.2f}"
        row = [load_label(lv), "/".join(lengths(lv)), tok_s_text(lv), ttft,
               f"{_ms(lv.tpot.p['p50'])}/{_ms(lv.tpot.p['p95'])}", e2e, f"{lv.req_s:.2f}"]
        if not compact:
            row += [f"{lv.goodput_req_s:.2f}", f"{lv.n_in_window} ({lv.n_ok})"]
        err = (f"{lv.error_rate:.0%}" if compact else f"{errors} ({lv.error_rate:.0%})") if errors else "0"
        row += [f"[red]{err}[/]" if errors else err, slo, escape(shown[lv.level_id])]
        t.add_row(*row)
    long_of = {short: long for long, short in SHORT_NOTES.items() if short != long}
    legend = "; ".join(f"{n} = {long_of[n]}" for n in dict.fromkeys(shown.values()) if n in long_of)
    if compact and any(lv.slo_met is False for lv in levels):
        legend = "; ".join(x for x in ("miss = missed the SLO", legend) if x)
    if any(lv.lengths_vary for lv in levels):
        legend = "; ".join(x for x in ("~ = mean measured tokens (the workload varies them)", legend) if x)
    t.caption = ("* P99 from fewer than 100 samples. Percentiles over requests sent in each level's measured "
                 "window; tok/s and req/s over what arrived in it" +
                 ("; goodput and counts: see the report." if compact else "; goodput = requests/s that met every SLO.")
                 + (f" {legend}." if legend else ""))
    return t


def run_summary_table(summary: RunSummary, title: str | None = None, width: int | None = None) -> Table:
    notes = {lv.level_id: summary.note(lv.level_id) for lv in summary.levels}
    return summary_table(summary.levels, notes, title=title or f"run {summary.info.run_id}", width=width)


def answer_lines(items) -> list[str]:
    """The answer block (reports.answer) as rich markup lines, run text escaped."""
    colour = {"good": "green", "bad": "red", "warn": "yellow", "neutral": "bold"}
    out = []
    for a in items:
        out.append(f"[{colour.get(a.tone, 'bold')}]{escape(a.label)}:[/] {escape(a.text)}")
        out += [f"    · {escape(e)}" for e in a.evidence]
    return out


def compare_table(c: Comparison) -> Table:
    t = Table(title=escape(f"A = {c.run_a}   B = {c.run_b}"), title_justify="left")
    for name, justify in [("level", "left"), ("metric", "left"), ("A", "right"), ("B", "right"),
                          ("B − A", "right"), ("95% CI of B − A", "right"), ("verdict", "left")]:
        t.add_column(name, justify=justify)
    colour = {"better": "green", "worse": "red", "within noise": "dim", "n/a": "dim"}
    for lc in c.levels:
        for i, d in enumerate(lc.deltas):
            t.add_row(escape(lc.level_id) if i == 0 else "", d.metric, fmt_value(d.metric, d.a),
                      fmt_value(d.metric, d.b), fmt_delta(d), fmt_ci(d.metric, d.ci),
                      f"[{colour[d.verdict]}]{escape(verdict_words(d))}[/]", end_section=i == len(lc.deltas) - 1)
    return t


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
