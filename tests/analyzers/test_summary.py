"""A whole run analyzed from its directory, against hand-computed values, including the edge cases:
a level with zero successes (all errors), one-token outputs (no TPOT), a single sample, an
interrupted run, windows from run.json or the spec."""

import pytest
from synth_run import make_run, rec

from analyzers.summary import analyze_run


def A(x):
    """Times are epoch seconds near 1.8e9, so derived durations carry ~2e-7 s of float rounding."""
    return pytest.approx(x, abs=1e-6)


@pytest.fixture()
def run(tmp_path):
    records = []
    # c1: TTFT 0.1, 0.2, 0.3, 2.0 s; E2E = TTFT + 0.4 s over 11 tokens -> TPOT 0.04 s each.
    for i, ttft in enumerate([0.1, 0.2, 0.3, 2.0]):
        records.append(rec(i, ttft, ttft + 0.4, 11, level="c1", concurrency=1, itl=[0.03, 0.05]))
    records.append(rec(10.5, 0.1, 0.5, 11, level="c1", concurrency=1, in_window=False))  # after the window
    # c2: nothing succeeded.
    records += [
        rec(
            1,
            None,
            None,
            11,
            status="error",
            level="c2",
            concurrency=2,
            kind="http_status",
            error="HTTP 500: <b>boom</b>",
        ),
        rec(2, None, None, 11, status="error", level="c2", concurrency=2, kind="http_status", error="HTTP 503"),
        rec(3, None, 30.0, 11, status="timeout", level="c2", concurrency=2, kind="timeout"),
    ]
    # c4: one-token outputs, so no TPOT.
    records += [rec(i, 0.2, 0.2, 1, level="c4", concurrency=4) for i in range(3)]
    # c8: a single sample.
    records.append(rec(0, 0.7, 1.2, 11, level="c8", concurrency=8))
    windows = {"c1": (0, 10), "c2": (0, 5), "c4": (0, 10), "c8": (0, 4)}
    return make_run(tmp_path / "run", records, windows)


def test_percentiles_throughput_and_goodput(run):
    s, _ = analyze_run(run)
    lv = {x.level_id: x for x in s.levels}["c1"]
    assert (lv.n_sent, lv.n_in_window, lv.n_ok) == (5, 4, 4)
    assert lv.ttft.n == 4 and lv.ttft.mean == A(0.65)
    assert lv.ttft.p["p50"] == A(0.25)
    assert lv.ttft.p["p90"] == A(0.3 + 0.7 * 1.7)  # numpy linear: rank 2.7
    assert lv.ttft.p["p99"] == A(0.3 + 0.97 * 1.7)
    assert all(v == A(0.04) for v in lv.tpot.p.values())
    assert lv.itl.n == 8 and lv.itl.p["p50"] == A(0.04)
    assert lv.output_tok_s == pytest.approx(44 / 10) and lv.total_tok_s == pytest.approx(84 / 10)
    assert lv.req_s == pytest.approx(0.4)
    assert lv.goodput_req_s == pytest.approx(0.3)  # the 2 s TTFT breaks the SLO
    assert lv.slo_met is False and "TTFT P99" in lv.slo_broken[0]
    assert not lv.ttft.p99_reliable


def test_all_errors_one_token_and_single_sample(run):
    s, _ = analyze_run(run)
    by = {x.level_id: x for x in s.levels}
    c2 = by["c2"]
    assert (c2.n_ok, c2.n_error, c2.n_timeout, c2.error_rate) == (0, 2, 1, 1.0)
    assert c2.errors_by_kind == {"http_status": 2, "timeout": 1}
    assert c2.error_samples["http_status"] == "HTTP 500: <b>boom</b>"
    assert c2.slo_met is False and c2.output_tok_s == 0 and c2.goodput_req_s == 0
    assert s.note("c2") == "over SLO (no successful requests)"
    c4 = by["c4"]
    assert c4.tpot.n == 0 and c4.tpot.p["p95"] is None and c4.slo_met is True
    assert c4.goodput_req_s == pytest.approx(0.3)  # judged on TTFT alone
    c8 = by["c8"]
    assert c8.ttft.n == 1 and all(v == A(0.7) for v in c8.ttft.p.values()) and c8.ttft.ci["p99"] == A([0.7, 0.7])
    assert c8.req_s == pytest.approx(1 / 4)
    assert s.best.level_id == "c8"  # the highest load that met the SLO
    d = s.to_dict()
    assert d["best_level_within_slo"] == "c8" and [x["level_id"] for x in d["levels"]] == ["c1", "c2", "c4", "c8"]
    assert any("Errors and timeouts: c2 (3 of 3, 100.0%: http_status 2, timeout 1)" in f for f in s.findings)


def test_windows_fall_back_to_the_spec_and_interrupted_runs_are_said(tmp_path):
    records = [rec(0, 0.1, 0.5, 11), rec(1, 0.1, 0.5, 11)]
    s, _ = analyze_run(make_run(tmp_path / "done", records, windows=None, duration_s=4.0))
    assert s.levels[0].window_s == 4.0 and s.levels[0].req_s == pytest.approx(0.5)
    s, _ = analyze_run(make_run(tmp_path / "cut", records, windows=None, status="interrupted", duration_s=4.0))
    # cut short: from the first send to the last completion
    assert "interrupted" in s.findings[0] and s.levels[0].window_s == A(1.5)


def test_torn_last_line_and_empty_run(tmp_path):
    run = make_run(tmp_path / "r", [rec(0, 0.1, 0.5, 11)], windows={"c1": (0, 1)})
    with open(run.requests_jsonl, "a") as f:
        f.write('{"level_id": "c1", "concurrency": 1, "t_se')  # killed mid-write
    s, table = analyze_run(run)
    assert len(table) == 1 and s.levels[0].n_ok == 1
    run.requests_jsonl.unlink()
    s, table = analyze_run(run)
    assert len(table) == 0 and s.levels == [] and s.best is None


def test_seed_case_study_knee_and_notes(tmp_path):
    """The seed's 70B table: c=8 780/34/260, c=16 950/39/430, c=32 1280/46/620, c=64 2150/74/760
    (TTFT P99 ms / TPOT P95 ms / tokens/s). Each level: identical requests, so percentiles are exact."""
    records = []
    for c, ttft_ms, tpot_ms, tput in [(8, 780, 34, 260), (16, 950, 39, 430), (32, 1280, 46, 620), (64, 2150, 74, 760)]:
        ttft, tpot = ttft_ms / 1000, tpot_ms / 1000
        # A steady stream of requests, warm-up before the window included, so that the tokens arriving
        # inside [0, 10) s are exactly tput per second (throughput counts arrivals).
        records += [
            rec((i + 0.5) * 10 / tput, ttft, ttft + tpot * 9, 10, level=f"c{c}", concurrency=c, in_window=i >= 0)
            for i in range(-tput // 2, tput)
        ]
    run = make_run(tmp_path / "seed", records, {f"c{c}": (0, 10) for c in (8, 16, 32, 64)})
    s, _ = analyze_run(run)
    assert [round(lv.output_tok_s) for lv in s.levels] == [260, 430, 620, 760]
    notes = {lv.level_id: s.note(lv.level_id) for lv in s.levels}
    assert notes == {"c8": "normal", "c16": "normal", "c32": "at target", "c64": "over SLO · near ceiling"}
    assert s.series[0].knee == "c32" and s.series[0].best_within_slo == "c32"
    assert s.scaling["c16"].efficiency == pytest.approx(430 / 260 - 1)
    assert s.scaling["c64"].linearity == pytest.approx(760 / (260 * 8))
    assert any("knee" in f and "c32" in f for f in s.findings)
    from reports.markdown import render_report_md

    md = render_report_md(s)
    assert "| c32 (knee) | 32 | 620.0 | 60% | 0.44 | 1280 | at target |" in md


def test_open_loop_levels_scale_by_request_rate(tmp_path):
    records = []
    for rate, n, ttft in [(1.0, 10, 0.2), (4.0, 40, 0.3), (16.0, 44, 3.0)]:  # saturates at 16 req/s
        for i in range(n):
            r = rec(i * 10 / n, ttft, ttft + 0.4, 11, level=f"r{rate:g}")
            r.concurrency, r.request_rate = None, rate
            records.append(r)
    s, _ = analyze_run(make_run(tmp_path / "open", records, {f"r{r:g}": (0, 10) for r in (1, 4, 16)}))
    assert s.series[0].key.startswith("request rate") and s.series[0].knee == "r4"
    assert [lv.load for lv in s.levels] == [1.0, 4.0, 16.0]
    assert {lv.level_id: s.note(lv.level_id) for lv in s.levels} == {
        "r1": "normal",
        "r4": "at target",
        "r16": "over SLO · near ceiling",
    }
    from reports.tables import summary_rows

    assert summary_rows(s)[0][1] == "1/s"


def test_a_level_cut_short_gets_a_window_from_its_send_times(tmp_path):
    # c1 finished (window recorded); c2 was interrupted 3 s into its 10 s window.
    records = [rec(i, 0.1, 0.5, 11, level="c1") for i in range(10)]
    records += [rec(20 + i * 0.5, 0.1, 0.5, 11, level="c2", concurrency=2) for i in range(7)]
    s, _ = analyze_run(make_run(tmp_path / "r", records, {"c1": (0, 10)}, status="interrupted"))
    c1, c2 = s.levels
    assert c1.window_s == 10 and c1.req_s == pytest.approx(1.0)
    assert c2.window_s == A(3.5) and c2.req_s == pytest.approx(7 / 3.5, abs=1e-5)  # first send .. last done
    assert any("did not finish" in n for n in c2.notes)


def test_the_knee_is_told_against_the_next_level_with_a_rate(tmp_path):
    """c1 and c16 stream 100 tok/s each; c4's requests outlast its window (no rate: a neighbour slowed
    them). The knee is c1 and the step that did not scale is c1 -> c16, not c1 -> c4: the finding and
    the answer name c16 (they once took the next level by position and failed on c4's missing rate)."""
    records = []
    for c in (1, 16):
        records += [rec((i + 0.5) / 10, 0.1, 1.0, 10, level=f"c{c}", concurrency=c) for i in range(-5, 100)]
    records += [rec(i * 2.5, 1.0, 30.0, 10, level="c4", concurrency=4) for i in range(4)]
    s, _ = analyze_run(make_run(tmp_path / "skip", records, {f"c{c}": (0, 10) for c in (1, 4, 16)}))
    assert s.scaling["c4"].efficiency is None and s.note("c4").endswith("· window < request")
    assert (s.series[0].knee, s.series[0].past_knee) == ("c1", "c16")
    knee = next(f for f in s.findings if "(the knee)" in f)
    assert "c16 has 16× the load" in knee
    from reports.answer import build_answer

    ceiling = next(i.text for i in build_answer(s) if i.label == "Ceiling")
    assert "from there to c16" in ceiling
