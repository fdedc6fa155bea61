"""Percentile-within-a-bound verdicts from the requests over the bound (exact binomial test)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analyzers.stats.exceedance import BoundCheck, _binom_cdf, check_bound, min_n_for_in


def _verdict(n: int, over: int, quantile: float = 0.99) -> str:
    values = np.r_[np.zeros(n - over), np.full(over, 2.0)]
    return check_bound("TTFT P99", values, quantile, 1.0).verdict


def test_the_thresholds_are_the_binomial_ones():
    assert min_n_for_in(0.99) == 299 and min_n_for_in(0.95) == 59
    assert (_verdict(298, 0), _verdict(299, 0)) == ("unclear", "in")       # 0.99^299 = 0.0495
    assert (_verdict(472, 1), _verdict(473, 1)) == ("unclear", "in")
    assert (_verdict(5, 1), _verdict(6, 1)) == ("out", "unclear")          # 1 - 0.99^5 = 0.049
    assert (_verdict(35, 2), _verdict(36, 2)) == ("out", "unclear")
    assert (_verdict(58, 0, 0.95), _verdict(59, 0, 0.95)) == ("unclear", "in")
    assert _verdict(400, 4) == "unclear"                                    # 1%: right at the bound
    assert check_bound("x", np.array([]), 0.99, 1.0).verdict == "unclear"


def test_the_log_space_sum_matches_the_exact_one():
    for n, k, p in ((10, 0, 0.01), (50, 3, 0.05), (300, 2, 0.01), (200, 199, 0.3)):
        exact = sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))
        assert _binom_cdf(k, n, p) == pytest.approx(exact, rel=1e-9)


def test_too_few_is_unclear_with_none_over_and_nonsense_is_refused():
    c = check_bound("TTFT P99", np.linspace(0, 0.5, 44), 0.99, 1.5)
    assert (c.n, c.over, c.verdict) == (44, 0, "unclear") and c.too_few
    with pytest.raises(ValueError):
        BoundCheck("x", 0.99, 1.0, 3, 5, "in")
