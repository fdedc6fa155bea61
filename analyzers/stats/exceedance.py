"""Is a percentile within a bound? Judged on how many requests were over the bound, with an exact
binomial test: no assumption about the latency distribution, and honest at small samples.

"TTFT P99 <= 1.5 s" means "at most 1% of requests take longer than 1.5 s". With `over` of `n`
requests past the bound:

- `in` when so few are over that a true share of 1% would give as few at most 5% of the time
  (P[Binomial(n, 0.01) <= over] <= 0.05): 0 of 299 or more, 1 of 473 or more, ...;
- `out` when so many are over that a true share of 1% would give as many at most 5% of the time
  (P[Binomial(n, 0.01) >= over] <= 0.05): 1 of 5 or fewer, 2 of 35 or fewer, ...;
- `unclear` otherwise, and always below `min_n_for_in` requests: 44 requests cannot establish a
  P99 within a bound, whatever their values (a bootstrap interval of their P99 would: it cannot
  reach past the sample's largest value, which is why the verdicts do not rest on it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05                     # one-sided: the answer's 95%


@dataclass(frozen=True)
class BoundCheck:
    name: str                    # "TTFT P99"
    quantile: float              # 0.99
    bound_s: float
    n: int
    over: int                    # requests past the bound
    verdict: str                 # in | out | unclear

    def __post_init__(self) -> None:
        if not 0 < self.quantile < 1 or not 0 <= self.over <= self.n:
            raise ValueError(f"bad check: quantile {self.quantile}, {self.over} over of {self.n}")
        if self.verdict not in ("in", "out", "unclear"):
            raise ValueError(f"verdict must be in, out or unclear, got {self.verdict!r}")

    @property
    def too_few(self) -> bool:
        """Unclear for want of requests: none over the bound, but fewer than min_n_for_in."""
        return self.verdict == "unclear" and self.over == 0


def min_n_for_in(quantile: float) -> int:
    """The fewest requests, none over the bound, that establish the percentile within it."""
    return math.ceil(math.log(ALPHA) / math.log(quantile))


def check_bound(name: str, values: np.ndarray, quantile: float, bound_s: float) -> BoundCheck:
    n = int(values.size)
    over = int((values > bound_s).sum())
    tail = 1.0 - quantile
    if n == 0:
        verdict = "unclear"
    elif _binom_cdf(over, n, tail) <= ALPHA:
        verdict = "in"
    elif over > 0 and 1.0 - _binom_cdf(over - 1, n, tail) <= ALPHA:
        verdict = "out"
    else:
        verdict = "unclear"
    return BoundCheck(name, quantile, bound_s, n, over, verdict)


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P[Binomial(n, p) <= k], summed in log space (n in the thousands stays exact enough)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
             for i in range(k + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))
