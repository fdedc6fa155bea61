"""Open-loop arrival plans: the mean rate, the burstiness (gamma shape) and determinism."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from loadgen.arrivals import ArrivalPlan


@pytest.mark.parametrize("burstiness", [1.0, 0.25, 4.0])
def test_gap_mean_and_spread(burstiness):
    plan = ArrivalPlan(rate=20.0, burstiness=burstiness, seed=1)
    gaps = np.array([plan.gap() for _ in range(20_000)])
    assert gaps.mean() == pytest.approx(1 / 20.0, rel=0.05)
    # gamma(k): coefficient of variation 1/sqrt(k); Poisson (k=1) has CV 1
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.07)


def test_times_are_increasing_and_deterministic():
    a = list(itertools.islice(ArrivalPlan(5.0, seed=3, stream=1).times(100.0), 50))
    b = list(itertools.islice(ArrivalPlan(5.0, seed=3, stream=1).times(100.0), 50))
    c = list(itertools.islice(ArrivalPlan(5.0, seed=3, stream=2).times(100.0), 50))
    assert a == b and a != c
    assert all(t1 > t0 for t0, t1 in zip([100.0] + a, a))


def test_bad_rate():
    with pytest.raises(ValueError):
        ArrivalPlan(0.0)
