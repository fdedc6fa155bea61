"""Replicas needed for a target rate: the count returned serves it and one fewer does not; more load never
needs fewer replicas; one replica's capacity is bracketed to 10%."""

import dataclasses

import pytest
from tiny_fleet import heavy_tailed, tiny_replica

from analyzers.plan.fleet import simulate_fleet
from analyzers.plan.fleet_sizing import (
    CAPACITY_RESOLUTION,
    SizingSpec,
    fewest,
    one_replica_capacity,
    replicas_needed,
    serves,
    size_fleet,
)

SLO_TTFT, SLO_TPOT = 0.05, 0.01


def _spec(rate: float) -> SizingSpec:
    return SizingSpec(rate, SLO_TTFT, SLO_TPOT, max_replicas=16, warmup_s=1.0, duration_s=3.0)


def test_fewest_returns_the_first_count_that_meets_with_one_fewer_missing():
    tried_from = {}
    for start in (1, 4, 9):
        n, tried = fewest(lambda n: n >= 5, start, 16)
        tried_from[start] = tried
        assert n == 5 and tried[5] and not tried[4]
    assert fewest(lambda n: False, 3, 6) == (None, {3: False, 4: False, 5: False, 6: False})
    assert fewest(lambda n: True, 3, 6)[0] == 1
    # Not monotone (a noisy simulation): from above it stops at the first miss below, never guessing past it.
    n, tried = fewest(lambda n: n in (2, 6, 7, 8), 8, 16)
    assert n == 6 and 4 not in tried


def test_replicas_needed_is_monotone_in_the_rate_and_meets_it_at_the_count_not_one_fewer():
    counts = []
    for rate in (60.0, 150.0, 240.0):
        spec = _spec(rate)
        count = replicas_needed(tiny_replica, heavy_tailed, spec, "round-robin", start=max(1, round(rate / 60)))
        assert count.replicas is not None
        counts.append(count.replicas)
        # The fleets it simulated at that count and one fewer, judged again here.
        assert count.at is not None and count.at.replicas == count.replicas and serves(count.at, spec)
        assert count.replicas == 1 or (count.below is not None and not serves(count.below, spec))
    assert counts == sorted(counts) and counts[0] < counts[-1]


def test_one_replicas_capacity_meets_the_slo_and_ten_percent_more_does_not():
    spec = _spec(1.0)
    cap = one_replica_capacity(tiny_replica, heavy_tailed, spec)
    assert cap.rate is not None and cap.lowest_miss is not None
    assert cap.rate < cap.lowest_miss <= cap.rate * (1 + CAPACITY_RESOLUTION) + 1e-9
    assert cap.tried[cap.rate] and not cap.tried[cap.lowest_miss]
    assert cap.rate < cap.saturated_req_s


@pytest.mark.slow
def test_round_robin_costs_replicas_that_least_outstanding_saves():
    from reports.replicas_words import policy_cost_words

    sizing = size_fleet(tiny_replica, heavy_tailed, _spec(240.0), ["round-robin", "least-outstanding"], 1)
    rr, lo = sizing.counts
    assert rr.replicas is not None and lo.replicas is not None and lo.replicas < rr.replicas
    words = policy_cost_words(sizing)
    assert f"round robin needs {rr.replicas} replicas" in words and f"least-outstanding needs {lo.replicas}" in words


def test_stopping_an_over_capacity_fleet_early_changes_no_verdict():
    spec = _spec(150.0)
    stops = []
    for n in (2, 3, 4, 5):
        early = simulate_fleet(tiny_replica, "round-robin", n, spec.load(150.0), heavy_tailed, sample=1)
        full = simulate_fleet(
            tiny_replica,
            "round-robin",
            n,
            dataclasses.replace(spec.load(150.0), stop_past_ttft_s=None),
            heavy_tailed,
            sample=1,
        )
        assert serves(early, spec) == serves(full, spec)
        stops.append(early.stopped_early)
    assert stops[0] and not stops[-1]
