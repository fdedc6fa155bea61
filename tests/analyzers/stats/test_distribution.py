"""Percentile confidence intervals: exact bootstrap for small samples, the order-statistic form for
large ones, both covering the true value about as often as they claim (throughput's: test_throughput.py)."""

import numpy as np
import pytest

from analyzers.stats.distribution import EXACT_BOOTSTRAP_MAX_N, Distribution, percentile_draws

TRUE_P95 = -np.log(0.05)  # exponential(1): P95 = ln 20


@pytest.mark.parametrize("n", [400, EXACT_BOOTSTRAP_MAX_N * 4])
def test_p95_interval_covers_the_truth(n):
    rng = np.random.default_rng(1)
    trials, covered = 40, 0
    for _ in range(trials):
        d = Distribution.of(rng.exponential(1.0, n), rng=rng)
        lo, hi = d.ci["p95"]
        assert lo <= d.p["p95"] <= hi
        covered += lo <= TRUE_P95 <= hi
    assert covered >= 0.8 * trials  # nominal 95%; 80% leaves room for 40 trials' noise


def test_intervals_narrow_with_more_samples():
    rng = np.random.default_rng(2)
    width = {}
    for n in (200, 20000):
        lo, hi = Distribution.of(rng.exponential(1.0, n), rng=rng).ci["p99"]
        width[n] = hi - lo
    assert width[20000] < width[200] / 4


def test_draws_are_seeded_and_shaped():
    v = np.arange(100.0)
    a = percentile_draws(v, (95, 99), np.random.default_rng(3))
    b = percentile_draws(v, (95, 99), np.random.default_rng(3))
    assert a.shape == (1000, 2) and np.array_equal(a, b)
    assert np.isnan(percentile_draws(np.array([]), (95,))).all()
