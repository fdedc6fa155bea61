"""Sizing a level (docs/metrics.md, "Sizing a level"): the warm-up ends at steady state, the window
once it holds its sample target, each within its bound; the window's bounds are still exact (every
record's flag follows its send time) and the coordinator's decision reaches every worker."""

from __future__ import annotations

import pytest
from loadgen_harness import run

from loadgen import LevelSpec
from loadgen.plan import Plan
from loadgen.sizing import ANNOUNCE_LEAD_S, LevelSizer


def _sized(level_id: str, **kw) -> LevelSpec:
    base = dict(input_len=16, output_len=8, warmup_s=0.2, duration_s=0.5, request_timeout_s=10.0, max_duration_s=8.0)
    return LevelSpec(level_id, **{**base, **kw})


def _check_flags(lr) -> None:
    res = lr.result
    assert res.end_reason == "complete" and res.records_missing == 0, res
    for r in lr.records:
        assert r.in_window == (res.window_start <= r.t_sent < res.window_end)


# ----- the rule, without processes --------------------------------------------------------------


def test_the_sizer_moves_the_window_start_at_steady_state_and_its_end_at_the_target():
    level = _sized("c4", concurrency=4, steady_warmup=True, sample_target=10, duration_s=2.0)
    plan = Plan.starting_at(100.0, level)
    assert (plan.window_start, plan.window_end) == (108.0, 116.0)  # provisional: the bounds
    sizer = LevelSizer(level, user_count=4)
    sizer.add("w0", {"records": [], "warm_users": 3, "window_in_flight": 0})
    assert sizer.decide(plan, now=101.0) is None  # one user has not finished yet
    sizer.add("w0", {"records": [], "warm_users": 4, "window_in_flight": 0})
    plan = sizer.decide(plan, now=101.0)
    assert plan.warmup_end == "steady" and plan.window_start == 101.0 + ANNOUNCE_LEAD_S
    assert plan.window_end == plan.window_start + 8.0 and plan.window_end_by == "max"
    ok = {"in_window": True, "status": "ok"}
    sizer.add(
        "w0", {"records": [ok] * 6 + [{"in_window": True, "status": "error"}], "warm_users": 4, "window_in_flight": 3}
    )
    assert sizer.decide(plan, now=102.0) is None  # 6 ok + 3 in flight < 10
    sizer.add("w0", {"records": [ok], "warm_users": 4, "window_in_flight": 3})
    moved = sizer.decide(plan, now=102.0)
    assert moved.window_end_by == "samples"
    # reached before its minimum window: it ends at the minimum, not before
    assert moved.window_end == plan.window_start + level.duration_s
    assert moved.hard_deadline == moved.window_end + level.request_timeout_s + 1.0
    assert sizer.decide(moved, now=102.1) is None  # decided once


def test_a_fixed_level_keeps_its_plan():
    level = LevelSpec("c2", concurrency=2, warmup_s=1.0, duration_s=3.0)
    plan = Plan.starting_at(10.0, level)
    assert (plan.window_start, plan.window_end, plan.warmup_end, plan.window_end_by) == (11.0, 14.0, "fixed", "fixed")
    assert not LevelSizer(level, 2).active


def test_sizing_options_are_checked():
    with pytest.raises(ValueError, match="max_duration_s"):
        LevelSpec("c1", concurrency=1, sample_target=100)
    with pytest.raises(ValueError, match="at least"):
        LevelSpec("c1", concurrency=1, sample_target=100, duration_s=30.0, max_duration_s=10.0)
    with pytest.raises(ValueError, match="closed-loop"):
        LevelSpec("r1", request_rate=1.0, steady_warmup=True, max_duration_s=10.0)


# ----- real levels against the delay server -----------------------------------------------------


@pytest.mark.slow
def test_a_sized_level_warms_up_to_steady_state_and_measures_its_target(delay_server):
    server = delay_server(ttft_ms=400, itl_ms=10)  # a first request takes ~0.5 s
    spec = _sized("c4", concurrency=4, steady_warmup=True, sample_target=40)
    lr = run(spec, server.target())
    res = lr.result
    _check_flags(lr)
    assert (res.warmup_end, res.window_end_by) == ("steady", "samples")
    # steady state: every user had finished a request before the window started
    assert sum(1 for r in lr.records if r.t_done < res.window_start) >= spec.concurrency
    assert res.window_start - res.t_start >= spec.warmup_s
    assert res.window_start - res.t_start < spec.max_duration_s
    # the window holds its target, ended well before its bound
    assert res.in_window_ok >= spec.sample_target
    assert res.window_end - res.window_start < spec.max_duration_s


def test_a_sized_window_stops_at_its_bound_when_the_target_is_out_of_reach(delay_server):
    server = delay_server(ttft_ms=50, itl_ms=10)
    spec = _sized("c2", concurrency=2, sample_target=100_000, duration_s=0.5, max_duration_s=1.5)
    lr = run(spec, server.target())
    res = lr.result
    _check_flags(lr)
    assert (res.warmup_end, res.window_end_by) == ("fixed", "max")
    assert res.window_end - res.window_start == pytest.approx(spec.max_duration_s)
    assert 0 < res.in_window_ok < spec.sample_target


@pytest.mark.slow
def test_two_workers_follow_the_coordinators_moved_window(delay_server):
    server = delay_server(ttft_ms=100, itl_ms=10)
    spec = _sized("c6-w2", concurrency=6, steady_warmup=True, sample_target=30, workers=2)
    lr = run(spec, server.target())
    res = lr.result
    _check_flags(lr)
    assert len(res.worker_ids) == 2 and {r.worker_id for r in lr.records if r.in_window} == set(res.worker_ids)
    assert (res.warmup_end, res.window_end_by) == ("steady", "samples")
    assert res.in_window_ok >= spec.sample_target


def test_an_open_loop_level_sizes_its_window_by_arrivals(delay_server):
    server = delay_server(ttft_ms=50, itl_ms=10)
    spec = _sized("r20", request_rate=20.0, sample_target=30, seed=3)
    lr = run(spec, server.target())
    res = lr.result
    _check_flags(lr)
    assert (res.warmup_end, res.window_end_by) == ("fixed", "samples")
    assert res.window_start - res.t_start == pytest.approx(spec.warmup_s)
    assert res.in_window_ok >= spec.sample_target
