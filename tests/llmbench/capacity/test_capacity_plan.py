"""The search's decisions, without a server: bracket by doubling, bisect to the resolution, repeat
the boundary, widen it when the judge finds a boundary load unclear."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from llmbench.capacity.search import CapacityPlan, SearchSpec
from loadgen.specs import LevelSpec

TEMPLATE = LevelSpec(level_id="x", concurrency=1, input_len=16, output_len=8)


def _drive(plan: CapacityPlan, meets, max_levels: int = 50) -> list[str]:
    stats: dict = {}
    for _ in range(max_levels):
        level = plan.next_level(stats)
        if level is None:
            return [p.level_id for p in plan.probes]
        load = level.concurrency if level.concurrency is not None else level.request_rate
        stats[level.level_id] = SimpleNamespace(slo_met=meets(load))
    raise AssertionError("the search did not end")


def test_concurrency_search_brackets_bisects_and_repeats_the_boundary():
    plan = CapacityPlan(SearchSpec("concurrency", repeats=2), TEMPLATE)
    ids = _drive(plan, lambda c: c <= 24)
    loads = [p.load for p in plan.probes]
    assert loads[:6] == [1, 2, 4, 8, 16, 32]  # doubling until one misses
    assert plan.bracket() == (24, 25)  # bisected to resolution 1
    assert ids.count("c24-in16-out8") == 1 and "c24-in16-out8-r2" in ids and "c25-in16-out8-r2" in ids
    assert len(ids) == len(set(ids))


def test_rate_search_is_geometric_to_ten_percent():
    plan = CapacityPlan(SearchSpec("rate", start=1, resolution=0.1, repeats=1), TEMPLATE)
    _drive(plan, lambda r: r <= 7.4)
    lo, hi = plan.bracket()
    assert lo <= 7.4 < hi and hi / lo <= 1.1


def test_unclear_boundary_gets_its_neighbour_measured():
    judge = lambda probes: {4.0}
    plan = CapacityPlan(SearchSpec("concurrency", repeats=2), TEMPLATE, judge=judge)
    _drive(plan, lambda c: c <= 3)
    loads = [p.load for p in plan.probes]
    assert loads.count(5.0) == 2 and plan.bracket() == (3, 4)


def test_limit_and_lowest_load():
    plan = CapacityPlan(SearchSpec("concurrency", limit=8, repeats=1), TEMPLATE)
    _drive(plan, lambda c: True)
    assert max(p.load for p in plan.probes) == 8
    plan = CapacityPlan(SearchSpec("concurrency", repeats=1), TEMPLATE)
    assert _drive(plan, lambda c: False) == ["c1-in16-out8"]


def test_a_resumed_search_replays_its_decisions_and_measures_only_what_is_left():
    """Interrupted after k levels, a new plan given those k levels' stats issues level k+1 next,
    and the whole search is the one an uninterrupted run makes."""
    meets = lambda c: c <= 5
    whole = CapacityPlan(SearchSpec("concurrency", repeats=2), TEMPLATE)
    ids = _drive(whole, meets)
    for k in (1, 4, len(ids) - 1):
        stats = {i: SimpleNamespace(slo_met=meets(p.load)) for i, p in zip(ids[:k], whole.probes[:k])}
        resumed = CapacityPlan(SearchSpec("concurrency", repeats=2), TEMPLATE)
        level = resumed.next_level(stats)
        assert level.level_id == ids[k]  # nothing measured twice, nothing skipped
        stats[level.level_id] = SimpleNamespace(slo_met=meets(level.concurrency))
        assert _drive_from(resumed, stats, meets) == ids
    done = {i: SimpleNamespace(slo_met=meets(p.load)) for i, p in zip(ids, whole.probes)}
    assert CapacityPlan(SearchSpec("concurrency", repeats=2), TEMPLATE).next_level(done) is None  # finished


def _drive_from(plan: CapacityPlan, stats: dict, meets) -> list[str]:
    while (level := plan.next_level(stats)) is not None:
        stats[level.level_id] = SimpleNamespace(slo_met=meets(level.concurrency))
    return [p.level_id for p in plan.probes]


def test_a_trace_is_searched_by_rate_each_level_replaying_it_at_the_speed_of_its_rate():
    template = LevelSpec(level_id="x", request_rate=5.0, input_len=16, output_len=8, trace_speed=1.0)
    plan = CapacityPlan(SearchSpec("rate", start=5.0, repeats=1, trace_rate=5.0), template)
    _drive(plan, lambda r: r <= 12)
    issued = plan.issued()
    assert [lv.request_rate for lv in issued][:3] == [5.0, 10.0, 20.0]
    assert all(abs(lv.trace_speed * 5.0 - lv.request_rate) < 1e-9 for lv in issued)
    with pytest.raises(ValueError, match="by rate"):
        SearchSpec("concurrency", trace_rate=5.0)


def test_a_start_that_already_misses_is_halved_until_a_load_meets_the_slo():
    plan = CapacityPlan(SearchSpec("rate", start=8, resolution=0.1, repeats=1), TEMPLATE)
    _drive(plan, lambda r: r <= 1.5)
    assert [p.load for p in plan.probes][:4] == [8, 4, 2, 1]
    lo, hi = plan.bracket()
    assert lo <= 1.5 < hi and hi / lo <= 1.1
    plan = CapacityPlan(SearchSpec("rate", start=8, repeats=1), TEMPLATE)
    _drive(plan, lambda r: False)
    assert min(p.load for p in plan.probes) == 0.125  # start / 64, then it stops
    plan = CapacityPlan(SearchSpec("concurrency", start=8, repeats=1), TEMPLATE)
    _drive(plan, lambda c: c <= 2)
    assert [p.load for p in plan.probes][:3] == [8, 4, 2] and plan.bracket() == (2, 3)
