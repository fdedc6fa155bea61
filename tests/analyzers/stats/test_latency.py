"""Per-level statistics against hand-computed values, including the edge cases."""

import math

import pytest

from analyzers.stats.distribution import Distribution
from analyzers.stats.scaling import analyze_scaling, best_level_within_slo
from analyzers.stats.summarize import summarize_level
from rundir import RequestRecord


def rec(ttft, e2e, n_out, status="ok", in_window=True, level="c1", t0=1000.0, n_in=10, kind=None, itl=(), conc=1):
    r = RequestRecord(
        level_id=level,
        concurrency=conc,
        request_rate=None,
        target_input_len=n_in,
        target_output_len=n_out,
        t_scheduled=t0,
        t_sent=t0,
        t_first_token=None if ttft is None else t0 + ttft,
        t_done=None if e2e is None else t0 + e2e,
        status=status,
        in_window=in_window,
        prompt_tokens=n_in if status == "ok" else None,
        completion_tokens=n_out if status == "ok" else None,
        client_completion_tokens=n_out if status == "ok" else None,
        itl_s=list(itl),
        error_kind=kind,
    )
    return r.derive()


def test_definitions_and_percentiles():
    # TTFT 0.1..1.0 s; E2E = TTFT + 1.0 s over 11 tokens -> TPOT exactly 0.1 s.
    records = [rec(0.1 * i, 0.1 * i + 1.0, 11) for i in range(1, 11)]
    lv = summarize_level(records, "c1", window_s=10.0)
    assert lv.ttft.n == 10 and math.isclose(lv.ttft.mean, 0.55)
    assert math.isclose(lv.ttft.p["p50"], 0.55)
    assert math.isclose(lv.ttft.p["p90"], 0.91)  # numpy linear: 0.1 + 0.9 * 9 * 0.1
    assert all(math.isclose(v, 0.1) for v in lv.tpot.p.values())
    assert lv.output_tok_s == pytest.approx(110 / 10.0)
    assert lv.total_tok_s == pytest.approx((110 + 100) / 10.0)
    assert lv.req_s == pytest.approx(1.0)
    assert not lv.ttft.p99_reliable and any("unreliable" in n for n in lv.notes)


def test_slo_verdict_and_goodput():
    fast = [rec(0.2, 1.2, 21) for _ in range(5)]  # TPOT 0.05 s: meets 50 ms exactly
    slow = [rec(2.0, 3.0, 21) for _ in range(5)]  # TTFT 2 s breaks the 1.5 s SLO
    lv = summarize_level(fast + slow, "c1", window_s=5.0)
    assert lv.slo_met is False
    assert lv.goodput_req_s == pytest.approx(5 / 5.0)
    assert summarize_level(fast, "c1", window_s=5.0).slo_met is True


def test_errors_counted_beside_percentiles_and_out_of_window_ignored():
    records = [
        rec(0.1, 0.5, 5),
        rec(None, None, 5, status="error", kind="http_status"),
        rec(None, 30.0, 5, status="timeout", kind="timeout"),
        rec(0.1, 0.5, 5, in_window=False),
    ]
    lv = summarize_level(records, "c1", window_s=1.0)
    assert (lv.n_sent, lv.n_in_window, lv.n_ok, lv.n_error, lv.n_timeout) == (4, 3, 1, 1, 1)
    assert lv.errors_by_kind == {"http_status": 1, "timeout": 1}
    assert lv.ttft.n == 1


def test_zero_successes_all_errors_and_one_token_outputs():
    lv = summarize_level([rec(None, None, 5, status="error", kind="connect")] * 3, "c1", window_s=2.0)
    # Every request failed: the level served nobody, so it missed the SLO (no percentile to show).
    assert lv.n_ok == 0 and lv.ttft.n == 0 and lv.ttft.p["p99"] is None and lv.slo_met is False
    assert lv.slo_broken == ["no successful requests"] and lv.error_rate == 1.0
    assert lv.output_tok_s == 0 and lv.goodput_req_s == 0 and lv.output_tok_s_ci is None
    assert summarize_level([], "c1", window_s=2.0).slo_met is None  # nothing measured: no verdict
    one = summarize_level([rec(0.2, 0.2, 1)], "c1", window_s=1.0)
    assert one.tpot.n == 0 and one.ttft.n == 1 and one.slo_met is True


def test_unhonoured_output_length_and_token_mismatch_reported():
    r = rec(0.1, 0.5, 5)
    r.target_output_len = 8
    r.client_token_chunks = 4  # usage says 5 tokens in 4 chunks: one chunk carried two (benign)
    lv = summarize_level([r], "c1", window_s=1.0)
    assert lv.output_len_unhonoured == 1 and lv.token_count_mismatches == 1 and lv.multi_token_chunks == 1
    assert any("requested 8" in n for n in lv.notes) and not any("chunks" in n for n in lv.notes)
    r.client_token_chunks = 6  # more chunks than usage counts: usage (or the stream) is wrong
    lv = summarize_level([r], "c1", window_s=1.0)
    assert lv.multi_token_chunks == 0 and any("more token chunks than" in n for n in lv.notes)


def test_client_tokenizer_difference_is_reported_as_a_difference():
    rs = [rec(0.1, 0.5, 10) for _ in range(4)]
    for r, n in zip(rs, (10, 12, 12, 10)):  # re-tokenized text: two requests count 12 tokens, not 10
        r.client_completion_tokens, r.client_token_chunks = n, 10
    lv = summarize_level(rs, "c1", window_s=1.0)
    assert lv.token_count_mismatches == 0 and lv.tokenizer_count_differs == 2
    assert lv.tokenizer_count_diff_mean == pytest.approx(0.10)
    assert not any(
        "tokenizer" in n for n in lv.notes
    )  # a benign difference: the run's findings explain it once (analyzers/findings/)


def test_output_tokens_fall_back_to_the_client_counts():
    r = rec(0.1, 0.5, 5)
    r.completion_tokens, r.client_completion_tokens, r.client_token_chunks = None, None, 7
    assert summarize_level([r], "c1", window_s=1.0).output_tok_s == 7


def test_ceiling_notes_and_best_level():
    levels = []
    for c, tput, ttft in [(1, 100, 0.1), (8, 600, 0.3), (32, 630, 0.9), (64, 640, 2.5)]:
        n_out = 11
        rs = [rec(ttft, ttft + 0.3, n_out, level=f"c{c}", conc=c) for _ in range(tput)]  # TPOT 30 ms
        levels.append(summarize_level(rs, f"c{c}", window_s=n_out))
    notes = {k: p.note for k, p in analyze_scaling(levels)[0].items()}
    # c8 -> c32: 4x the load for 5% more throughput (efficiency 0.017 < 0.25): near the ceiling;
    # c32 is also the highest load within the SLO; c64 breaks TTFT P99.
    assert notes == {
        "c1": "normal",
        "c8": "normal",
        "c32": "at target · near ceiling",
        "c64": "over SLO · near ceiling",
    }
    assert best_level_within_slo(levels).level_id == "c32"


def test_distribution_of_nothing():
    d = Distribution.of([None, None])
    assert d.n == 0 and d.mean is None


def test_a_closed_loop_window_shorter_than_its_requests_has_no_rate():
    """Requests of 20 s in a 10-s window: the tokens that arrived in it are one phase of requests
    that move together, not a rate; the level says so, and readers that hold a throughput against
    something (predictions, departures) get None. Its neighbours are rates: requests shorter than
    the window, and an open loop's (arrivals not in phase) however long."""
    long_ones = [rec(5.0, 20.0, 11, t0=1000.0 + i, conc=4) for i in range(4)]
    lv = summarize_level(long_ones, "c1", window_s=10.0)
    assert lv.window_shorter_than_request and lv.steady_output_tok_s is None
    assert lv.output_tok_s > 0  # still the tokens that arrived: reported, not held against anything
    assert any("shorter than a request of this level (E2E P50 20.0 s)" in n for n in lv.notes)

    short_ones = [rec(0.5, 2.0, 11, t0=1000.0 + i, conc=4) for i in range(4)]
    short = summarize_level(short_ones, "c1", window_s=10.0)
    assert not short.window_shorter_than_request and short.steady_output_tok_s == short.output_tok_s

    open_loop = [rec(5.0, 20.0, 11, t0=1000.0 + i, conc=None) for i in range(4)]
    assert summarize_level(open_loop, "c1", window_s=10.0).steady_output_tok_s is not None

    nothing_sent = [rec(5.0, 20.0, 11, t0=1000.0 + i, conc=4, in_window=False) for i in range(4)]
    assert summarize_level(nothing_sent, "c1", window_s=10.0).steady_output_tok_s is None


def test_the_planner_reads_the_same_rule_from_summary_json():
    from analyzers.plan.measured import level_metrics

    lv = summarize_level([rec(5.0, 20.0, 11, t0=1000.0 + i, conc=4) for i in range(4)], "c1", window_s=10.0)
    assert level_metrics(lv.to_dict())["output_tok_s"] is None
    ok = summarize_level([rec(0.5, 2.0, 11, t0=1000.0 + i, conc=4) for i in range(4)], "c1", window_s=10.0)
    assert level_metrics(ok.to_dict())["output_tok_s"] == pytest.approx(ok.output_tok_s)


def test_a_window_shorter_than_its_requests_is_no_point_on_the_scaling_curve():
    """Its tokens/s is one phase of its requests: the curve, the knee and the ceiling skip it, and its
    note says why, beside its SLO verdict."""
    short = summarize_level([rec(0.5, 2.0, 11, t0=1000.0 + i, conc=1) for i in range(4)], "c1", window_s=10.0)
    long_recs = [rec(5.0, 20.0, 11, t0=1000.0 + i, level="c4", conc=4) for i in range(8)]
    long = summarize_level(long_recs, "c4", window_s=10.0)
    points, series = analyze_scaling([short, long])
    assert points["c4"].linearity is None and points["c4"].efficiency is None
    assert points["c4"].note.endswith("· window < request")
    assert series[0].knee is None
