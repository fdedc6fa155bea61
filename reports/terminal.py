"""The sweep's summary table, in the shape of the seed's case study:
concurrency | input len | throughput | TTFT P50/P99 | TPOT P50/P95 | E2E P99 | req/s | errors | SLO."""

from __future__ import annotations

from rich.table import Table

from analyzers.latency import LevelStats


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v * 1000:.0f}"


def _load(lv: LevelStats) -> str:
    return str(lv.concurrency) if lv.concurrency is not None else f"{lv.request_rate:g}/s"


def summary_table(levels: list[LevelStats], notes: dict[str, str], title: str = "sweep summary") -> Table:
    load_header = "concurrency" if all(lv.concurrency is not None for lv in levels) else "load"
    t = Table(title=title, title_justify="left")
    for name, justify in [(load_header, "right"), ("input len", "right"), ("output tok/s", "right"),
                          ("TTFT P50/P99 ms", "right"), ("TPOT P50/P95 ms", "right"), ("E2E P99 s", "right"),
                          ("req/s", "right"), ("n (ok)", "right"), ("errors", "right"), ("SLO", "center"),
                          ("note", "left")]:
        t.add_column(name, justify=justify)
    for lv in levels:
        errors = lv.n_error + lv.n_timeout
        slo = {True: "[green]met[/]", False: "[red]missed[/]", None: "—"}[lv.slo_met]
        ttft = f"{_ms(lv.ttft.p['p50'])}/{_ms(lv.ttft.p['p99'])}" + ("*" if lv.ttft.n and not lv.ttft.p99_reliable else "")
        e2e = "—" if lv.e2e.p["p99"] is None else f"{lv.e2e.p['p99']:.2f}"
        t.add_row(_load(lv), str(lv.input_len), f"{lv.output_tok_s:.1f}", ttft,
                  f"{_ms(lv.tpot.p['p50'])}/{_ms(lv.tpot.p['p95'])}", e2e, f"{lv.req_s:.2f}",
                  f"{lv.n_in_window} ({lv.n_ok})", f"[red]{errors}[/]" if errors else "0", slo,
                  notes.get(lv.level_id, ""))
    t.caption = "* P99 from fewer than 100 samples. Percentiles over requests sent in each level's measured window."
    return t
