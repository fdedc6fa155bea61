"""Failed requests count in the SLO verdict (issue 23 item 1): a request that failed without a first
token is over every TTFT bound, one cut off mid-stream over the E2E (and TPOT) bound; the displayed
distributions stay the successful requests'; goodput never counts a failure; `llmbench compare`
judges latency on the same basis, so a run is not "better" because its slow requests failed."""

import math

import numpy as np
import pytest
from synth_run import make_run, rec

from analyzers.compare import compare_runs
from analyzers.stats.slo import Slos
from analyzers.stats.summarize import summarize_level
from analyzers.summary import analyze_run


def _issue_level(n_ok: int = 544, n_hung: int = 23, level: str = "c8"):
    """The issue's server: most requests answer in 20 ms, 1 in 25 never does (a 3 s request timeout)."""
    out = []
    for i in range(n_ok + n_hung):
        if i % 24 == 23 and n_hung:
            n_hung -= 1
            out.append(
                rec(
                    i * 0.01,
                    None,
                    3.0,
                    11,
                    status="timeout",
                    level=level,
                    concurrency=8,
                    kind="timeout",
                    error="deadline passed",
                )
            )
        else:
            out.append(rec(i * 0.01, 0.02, 0.07, 11, level=level, concurrency=8))
    return out


def test_timeouts_without_a_first_token_break_the_ttft_p99():
    records = _issue_level()
    assert sum(r.status == "timeout" for r in records) == 23 and len(records) == 567
    lv = summarize_level(records, "c8", 10.0, Slos(ttft_p99_s=0.1, tpot_p95_s=0.05))
    # What the tables show is unchanged: the successful requests' distribution, the errors beside it.
    assert lv.ttft.n == 544 and lv.ttft.p["p99"] == pytest.approx(0.02, abs=1e-6) and lv.n_timeout == 23
    assert lv.error_rate == pytest.approx(23 / 567)  # under 5%: a valid measurement
    # What the verdict rests on: 4% never answered, so the P99 of the requests sent is over 3 s.
    assert lv.slo_met is False
    assert lv.slo_broken == ["TTFT P99 > 3 s counting the 23 requests that failed without a first token (bound 100 ms)"]
    assert lv.n_failed_no_token == 23 and lv.n_failed_mid_stream == 0
    assert lv.ttft_p99_unbounded and lv.ttft_p99_with_failures_s == pytest.approx(3.0, abs=1e-3)


def test_the_sweep_answer_and_findings_say_the_failures(tmp_path):
    records = _issue_level() + [rec(i * 0.01, 0.02, 0.07, 11, level="c1", concurrency=1) for i in range(500)]
    run = make_run(
        tmp_path / "run", records, {"c8": (0, 10), "c1": (0, 10)}, slos={"ttft_p99_s": 0.1, "tpot_p95_s": 0.05}
    )
    s, _ = analyze_run(run)
    assert s.best is not None and s.best.level_id == "c1"  # c8 is not "within the SLO"
    over = next(f for f in s.finding_groups if f.kind == "over_slo:TTFT P99")
    assert over.text == (
        "Over the SLO on TTFT P99 (bound 100 ms): c8 (> 3 s counting the 23 requests that failed "
        "without a first token)."
    )
    level = next(x for x in s.to_dict()["levels"] if x["level_id"] == "c8")
    assert level["ttft_p99_unbounded"] is True and level["n_failed_no_token"] == 23


def test_a_few_failures_move_the_p99_but_need_not_break_it():
    """1 of 400 without a first token: the P99 is still a finite rank of the sample, within the bound."""
    records = [rec(i * 0.01, 0.01 * (1 + i % 10), 0.5, 11) for i in range(399)]
    records.append(rec(5.0, None, 0.001, 11, status="error", kind="http_status", error="HTTP 500"))
    lv = summarize_level(records, "c1", 10.0, Slos(ttft_p99_s=0.2, tpot_p95_s=0.1))
    assert lv.slo_met is True and not lv.ttft_p99_unbounded
    assert lv.ttft_p99_with_failures_s == pytest.approx(0.1) and lv.n_failed_no_token == 1


def test_the_answer_gives_the_p99_the_verdict_used(tmp_path):
    """A level within the SLO with a failure among its requests: the answer's TTFT P99 counts it."""
    from reports.answer import build_answer

    records = [rec(i * 0.02, 0.01 * (1 + i % 10), 0.5, 11, level="c4", concurrency=4) for i in range(399)]
    records.append(rec(5.0, None, 0.001, 11, status="error", level="c4", concurrency=4, kind="http_status"))
    s, _ = analyze_run(
        make_run(tmp_path / "run", records, {"c4": (0, 10)}, slos={"ttft_p99_s": 0.2, "tpot_p95_s": 0.1})
    )
    within = build_answer(s)[0]
    assert within.tone == "good" and "TTFT P99 100 ms counting the 1 of 400 requests that failed" in within.text


def test_a_request_cut_off_mid_stream_is_over_the_e2e_bound():
    """10 of 410 streams broke after their first token, before the E2E bound was even reached: none
    of them was served; with an E2E SLO they are over it (and their TPOT is not within its bound)."""
    records = [rec(i * 0.02, 0.1, 0.5, 11) for i in range(400)]
    records += [
        rec(0.01 + i * 0.5, 0.1, 0.3, 11, status="error", kind="stream_broken", error="connection reset")
        for i in range(10)
    ]
    slos = Slos(ttft_p99_s=1.0, tpot_p95_s=0.1, e2e_p99_s=2.0)
    lv = summarize_level(records, "c1", 10.0, slos)
    assert lv.slo_met is False
    assert lv.slo_broken == ["E2E P99 > 2 s counting the 10 requests that failed (bound 2 s)"]
    assert lv.n_failed_mid_stream == 10 and lv.n_failed_no_token == 0
    # Without an E2E bound the TTFT was real and the TPOT P95 holds (2.4% cut off < 5%).
    assert summarize_level(records, "c1", 10.0, Slos(ttft_p99_s=1.0, tpot_p95_s=0.1)).slo_met is True


def test_the_sample_rules():
    """SloSample: no first token -> TTFT +inf, no TPOT; cut off -> TPOT +inf (unless one token was asked);
    every failure -> E2E +inf; cancelled requests are left out."""
    from analyzers.stats.slo import SloSample, tail_percentile

    status = np.array(["ok", "timeout", "error", "error", "cancelled"], dtype=object)
    ttft = np.array([0.1, np.nan, 0.2, 0.2, 0.1])
    tpot = np.array([0.01, np.nan, np.nan, np.nan, np.nan])
    e2e = np.array([0.5, 3.0, 0.4, 0.4, 0.2])
    s = SloSample.of(status, ttft, tpot, e2e, np.array([11, 11, 11, 1, 11]))
    assert (s.n, s.n_ok, s.no_token, s.mid_stream) == (4, 1, 1, 2)
    assert s.ttft.tolist() == [0.1, math.inf, 0.2, 0.2]
    assert s.tpot[0] == 0.01 and math.isnan(s.tpot[1]) and s.tpot[2] == math.inf and math.isnan(s.tpot[3])
    assert s.e2e.tolist() == [0.5, math.inf, math.inf, math.inf]
    assert s.failure_summary() == "3 of 4 failed (1 no first token, 2 cut off mid-stream)"
    assert tail_percentile(np.array([1.0, 2.0, math.inf]), 50) == 2.0
    assert tail_percentile(np.array([1.0, 2.0, math.inf]), 51) == math.inf
    assert tail_percentile(np.array([math.inf, math.inf]), 10) == math.inf


def test_goodput_never_counts_a_failed_request():
    """Timeouts and streams cut off mid-way finished (failed) inside the window; only successes that met
    every bound are good, however fast the failure was."""
    records = [rec(i * 0.02, 0.1, 0.5, 11) for i in range(400)]
    records += [rec(1 + i * 0.5, None, 0.05, 11, status="timeout", kind="timeout") for i in range(5)]
    records += [rec(1.2 + i * 0.5, 0.01, 0.02, 11, status="error", kind="stream_broken") for i in range(5)]
    lv = summarize_level(records, "c1", 10.0, Slos(ttft_p99_s=1.0, tpot_p95_s=0.1))
    assert lv.req_s == pytest.approx(400 / 10.0)
    assert lv.goodput_req_s == pytest.approx(400 / 10.0)


def _run(path, records):
    return analyze_run(make_run(path, records, {"c4": (0, 10)}))


def test_compare_is_not_fooled_by_failures_dropped_from_the_tail(tmp_path):
    """B answers 97% of its requests fast and never answers the rest; A answers all of them, slower.
    On successful requests alone B's TTFT P99 would be far "better"; on the requests sent it is worse."""
    rng = np.random.default_rng(5)
    a = [rec(i * 0.03, 0.3 + 0.2 * rng.random(), 1.0, 11, level="c4", concurrency=4) for i in range(300)]
    b = [rec(i * 0.03, 0.05 + 0.01 * rng.random(), 0.6, 11, level="c4", concurrency=4) for i in range(291)]
    b += [rec(0.01 + i, None, 3.0, 11, status="timeout", level="c4", concurrency=4, kind="timeout") for i in range(9)]
    c = compare_runs(_run(tmp_path / "a", a), _run(tmp_path / "b", b))
    by = {d.metric: d for d in c.levels[0].deltas}
    p99 = by["TTFT P99"]
    assert p99.verdict == "worse" and p99.b == math.inf and p99.delta is None and "B's" in p99.note
    assert by["E2E P99"].verdict == "worse"
    assert by["TTFT P50"].verdict == "better"  # the typical request really is faster on B
    back = compare_runs(_run(tmp_path / "b2", b), _run(tmp_path / "a2", a))
    assert {d.metric: d for d in back.levels[0].deltas}["TTFT P99"].verdict == "better"


def test_a_compare_with_failures_on_both_sides_says_unbounded_without_numpy_warnings(tmp_path):
    """Both runs' tails reach their failed requests: the bootstrap's inf - inf draws are dropped
    quietly, and the tables say "unbounded" and why, never "inf ms"."""
    import warnings

    from reports.markdown import render_compare_md
    from reports.terminal import fmt_value, verdict_words

    rng = np.random.default_rng(6)
    runs = []
    for name in ("a", "b"):
        recs = [rec(i * 0.03, 0.1 + 0.1 * rng.random(), 0.8, 11, level="c4", concurrency=4) for i in range(280)]
        recs += [
            rec(0.01 + i, None, 3.0, 11, status="timeout", level="c4", concurrency=4, kind="timeout") for i in range(20)
        ]
        runs.append(_run(tmp_path / name, recs))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        c = compare_runs(*runs)
    p99 = {d.metric: d for d in c.levels[0].deltas}["TTFT P99"]
    assert fmt_value(p99.metric, p99.b) == "unbounded" and "unbounded" in verdict_words(p99)
    md = render_compare_md([c])
    assert "inf ms" not in md and "reaches their failed requests" in md
