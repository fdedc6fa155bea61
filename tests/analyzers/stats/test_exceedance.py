"""Percentile-within-a-bound verdicts from the requests over the bound (exact binomial test)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analyzers.stats.exceedance import BoundCheck, binom_cdf, check_bound, min_n_for_in


def _verdict(n: int, over: int, quantile: float = 0.99) -> str:
    values = np.r_[np.zeros(n - over), np.full(over, 2.0)]
    return check_bound("TTFT P99", values, quantile, 1.0).verdict


def test_the_thresholds_are_the_binomial_ones():
    assert min_n_for_in(0.99) == 299 and min_n_for_in(0.95) == 59
    assert (_verdict(298, 0), _verdict(299, 0)) == ("unclear", "in")  # 0.99^299 = 0.0495
    assert (_verdict(472, 1), _verdict(473, 1)) == ("unclear", "in")
    assert (_verdict(5, 1), _verdict(6, 1)) == ("out", "unclear")  # 1 - 0.99^5 = 0.049
    assert (_verdict(35, 2), _verdict(36, 2)) == ("out", "unclear")
    assert (_verdict(58, 0, 0.95), _verdict(59, 0, 0.95)) == ("unclear", "in")
    assert _verdict(400, 4) == "unclear"  # 1%: right at the bound
    assert check_bound("x", np.array([]), 0.99, 1.0).verdict == "unclear"


def test_the_log_space_sum_matches_the_exact_one():
    for n, k, p in ((10, 0, 0.01), (50, 3, 0.05), (300, 2, 0.01), (200, 199, 0.3)):
        exact = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))
        assert binom_cdf(k, n, p) == pytest.approx(exact, rel=1e-9)


def test_too_few_is_unclear_with_none_over_and_nonsense_is_refused():
    c = check_bound("TTFT P99", np.linspace(0, 0.5, 44), 0.99, 1.5)
    assert (c.n, c.over, c.verdict) == (44, 0, "unclear") and c.too_few
    with pytest.raises(ValueError):
        BoundCheck("x", 0.99, 1.0, 3, 5, "in")


# ----- closed loop: requests over the bound in bursts (the design effect) -------------------------


def _check(past: np.ndarray, quantile: float = 0.99):
    """check_bound on values 0 / 2 (bound 1), sent in order: `past` marks the ones over the bound."""
    return check_bound("TTFT P99", np.where(past, 2.0, 0.0), quantile, 1.0, np.arange(past.size, dtype=float))


def _scattered(n: int, over: int) -> np.ndarray:
    past = np.zeros(n, dtype=bool)
    past[np.linspace(0, n - 1, over).round().astype(int)] = True
    return past


def _burst(n: int, over: int, at: int = 0) -> np.ndarray:
    past = np.zeros(n, dtype=bool)
    past[at : at + over] = True
    return past


def test_a_burst_of_ten_late_together_is_weaker_evidence_than_ten_scattered():
    # out: 10 of 200 scattered break a P99; 10 in one burst are one event among ~20
    scattered, burst = _check(_scattered(200, 10)), _check(_burst(200, 10, at=95))
    assert scattered.design_effect == 1.0 and scattered.verdict == "out"
    assert burst.design_effect > 8 and burst.verdict == "unclear"  # straddling two blocks: seen whole
    # in: 10 of 2000 scattered establish a P99; one burst of 10 does not
    scattered, burst = _check(_scattered(2000, 10)), _check(_burst(2000, 10, at=1000))
    assert scattered.verdict == "in" and burst.verdict == "unclear"
    # without send times the burst reads as independent draws: the test before the design effect
    assert check_bound("TTFT P99", np.where(_burst(200, 10), 2.0, 0.0), 0.99, 1.0).verdict == "out"


def test_independent_draws_are_not_widened_much_and_spread_overload_stays_out():
    rng = np.random.default_rng(7)
    effects = [_check(rng.random(2000) < 0.03).design_effect for _ in range(50)]
    assert np.mean(effects) < 1.3
    spread = _check(rng.random(400) < 0.2)  # a standing overload: over the bound everywhere
    assert spread.verdict == "out" and spread.design_effect < 2
    whole = _check(np.ones(400, dtype=bool))  # every request over: no variance, no widening
    assert (whole.design_effect, whole.verdict) == (1.0, "out")


def test_nothing_over_shows_no_clustering_and_the_thresholds_stand():
    assert (_check(np.zeros(299, dtype=bool)).verdict, _check(np.zeros(298, dtype=bool)).verdict) == ("in", "unclear")
    assert _check(np.zeros(299, dtype=bool)).design_effect == 1.0
    assert _check(_burst(15, 1, at=7)).design_effect == 1.0  # too few requests for blocks: as independent
    with pytest.raises(ValueError):
        BoundCheck("x", 0.99, 1.0, 10, 1, "in", design_effect=0.5)


def test_the_send_order_not_the_value_order_makes_the_blocks():
    past = _burst(400, 8, at=200)
    shuffled = np.random.default_rng(3).permutation(400)
    c = check_bound("TTFT P99", np.where(past, 2.0, 0.0)[shuffled], 0.99, 1.0, np.arange(400.0)[shuffled])
    assert c.design_effect == _check(past).design_effect > 4
