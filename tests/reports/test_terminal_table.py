"""The sweep's terminal table keeps every number whole on an 80-column terminal."""

from __future__ import annotations

from rich.console import Console
from synth_run import make_run, rec

from analyzers.summary import analyze_run
from reports.grid import print_grid
from reports.terminal import run_summary_table


def _render(summary, width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    print_grid(console, run_summary_table(summary))
    return console.export_text()


def test_narrow_terminal_keeps_the_numbers(tmp_path):
    recs = [rec(0.1 * i, 0.2 + 0.001 * i, 1.2, 11, level="c64", concurrency=64) for i in range(50)]
    summary, _ = analyze_run(make_run(tmp_path / "r", recs, windows={"c64": (0.0, 10.0)}))
    lv = summary.levels[0]
    ttft = f"{lv.ttft.p['p50'] * 1000:.0f}/{lv.ttft.p['p99'] * 1000:.0f}"
    narrow, wide = _render(summary, 80), _render(summary, 160)
    assert all(len(line) <= 80 for line in narrow.splitlines())
    for text in (narrow, wide):
        assert ttft in text and f"{lv.output_tok_s:.1f}" in text and "missed" in text  # TPOT 98 ms > 50 ms
    assert "goodput" in wide and "goodput" not in narrow.split("*")[0]  # left to the report when narrow


def test_80_columns_cut_no_word_and_show_what_was_sent(tmp_path):
    recs = [
        rec(0.1 * i, 1.4 + 0.01 * i, 2.6, 11 + i % 7, level="c16", concurrency=16, n_in=100 + 37 * (i % 9))
        for i in range(50)
    ]  # lengths vary per request (a ShareGPT-like workload)
    recs += [
        rec(20 + 0.1 * i, None, None, 11, status="error", level="c64", concurrency=64, kind="connect")
        for i in range(20)
    ]  # a level with 100% errors
    summary, _ = analyze_run(make_run(tmp_path / "r", recs, windows={"c16": (0.0, 10.0), "c64": (20.0, 30.0)}))
    text = _render(summary, 80)
    assert all(len(line) <= 80 for line in text.splitlines())
    rows = {line.split()[0]: line for line in text.splitlines() if line.strip().startswith(("16 ", "64 "))}
    assert "over, 0 ok" in rows["64"] and "100%" in rows["64"]  # the note whole, abbreviated; the error rate
    lv = summary.levels[0]
    assert f"~{lv.prompt_tokens_mean:.0f}/~{lv.output_tokens_mean:.0f}" in rows["16"]  # measured, not 0
    caption = " ".join(text.split("*", 1)[1].split())
    for words in (
        "level's measured window",
        "over, 0 ok = over SLO (no successful requests)",
        "miss = missed",
        "~ = mean measured tokens",
    ):
        assert words in caption, caption


def test_a_level_that_measured_nothing_shows_no_throughput(tmp_path):
    """Only the warm-up cohort streamed through the window (no request was sent in it): the tokens that
    arrived there are not the level's throughput, so no row shows one."""
    from reports.tables import scaling_rows, summary_rows

    recs = [
        rec(0.01 * u, 6.0, 40.0, 64, level="c64", concurrency=64, in_window=False, itl=[0.5] * 63) for u in range(64)
    ]
    recs += [rec(40.0 + 0.3 * i, 0.2, 0.8, 11, level="c1", concurrency=1) for i in range(30)]
    summary, _ = analyze_run(make_run(tmp_path / "r", recs, windows={"c64": (5.0, 25.0), "c1": (40.0, 50.0)}))
    lv = {x.level_id: x for x in summary.levels}["c64"]
    assert lv.n_in_window == 0 and lv.output_tok_s > 0  # tokens did arrive in the window
    row = next(r for r in summary_rows(summary) if r[0] == "c64")
    assert row[4] == "—" and "nothing measured" in row[-1]
    assert next(r for r in scaling_rows(summary) if r[0].startswith("c64"))[2] == "—"
    line = next(x for x in _render(summary, 160).splitlines() if "nothing measured" in x)
    assert f"{lv.output_tok_s:.1f}" not in line and "—" in line
