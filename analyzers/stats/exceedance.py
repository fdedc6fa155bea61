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

The binomial assumes independent requests; closed-loop ones are not (docs/metrics.md,
"Independence"): one stall of the server makes every request waiting at that moment late together,
so 8 users give 8 requests over the bound from one event. When the requests' send times are known,
the test is widened by a **design effect** estimated from the level's own data (batch means): the
requests in send order are cut into `BLOCKS` equal blocks (and again, shifted by half a block), and
D = variance / mean of the blocks' counts over the bound (the larger of the two cuts), at least 1:
about 1 for independent draws, about the burst's size when the over requests come in bursts. The test then runs on n / D requests with over / D of them over,
rounded against the verdict (fewer requests and more over for `in`; more requests and fewer over
for `out`). A burst of 10 requests late together is one event among n / 10, not 10 among n.

Requests late by coincidence (independent slow ones that overlap in time) do not widen it: the count
per block varies as independent draws do.

A level with nothing over the bound shows no clustering of its own, and judged alone as independent
draws its `in` is optimistic where the server stalls rarely (a 400-request level with no stall in it
was called `in` for a server 1.5% over: bench/exceedance_calibration.py). Clustering is the
deployment's, not one level's: a search judges every level with at least the **pooled design effect**
of all its levels (`pooled_design_effect`: the blocks' variance within each level, over what their
means predict, summed over the levels, so levels at different rates do not inflate it). A server that
stalled anywhere in the search needs about D times more requests for an `in` everywhere in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05  # one-sided: the answer's 95%
BLOCKS = 20  # batch means: blocks of a level's requests in send order (at least 10 each)


@dataclass(frozen=True)
class BoundCheck:
    name: str  # "TTFT P99"
    quantile: float  # 0.99
    bound_s: float
    n: int
    over: int  # requests past the bound
    verdict: str  # in | out | unclear
    design_effect: float = 1.0  # how many requests one independent draw counts as (1: as independent)

    def __post_init__(self) -> None:
        if not 0 < self.quantile < 1 or not 0 <= self.over <= self.n:
            raise ValueError(f"bad check: quantile {self.quantile}, {self.over} over of {self.n}")
        if self.design_effect < 1.0:
            raise ValueError(f"a design effect is at least 1, got {self.design_effect}")
        if self.verdict not in ("in", "out", "unclear"):
            raise ValueError(f"verdict must be in, out or unclear, got {self.verdict!r}")

    @property
    def too_few(self) -> bool:
        """Unclear for want of requests: none over the bound, but fewer than min_n_for_in."""
        return self.verdict == "unclear" and self.over == 0


def min_n_for_in(quantile: float) -> int:
    """The fewest requests, none over the bound, that establish the percentile within it."""
    return math.ceil(math.log(ALPHA) / math.log(quantile))


def check_bound(
    name: str,
    values: np.ndarray,
    quantile: float,
    bound_s: float,
    sent_at: np.ndarray | None = None,
    design_effect_floor: float = 1.0,
) -> BoundCheck:
    """`sent_at`: each value's send time, for the design effect (see the top); None: independent draws.
    `design_effect_floor`: the clustering measured elsewhere in the search (pooled_design_effect)."""
    n = int(values.size)
    past = values > bound_s
    over = int(past.sum())
    own = design_effect(past[np.argsort(sent_at, kind="stable")]) if sent_at is not None else 1.0
    deff = max(own, design_effect_floor)
    tail = 1.0 - quantile
    if n == 0:
        verdict = "unclear"
    elif binom_cdf(math.ceil(over / deff - 1e-9), math.floor(n / deff + 1e-9), tail) <= ALPHA:
        verdict = "in"
    elif over > 0 and 1.0 - binom_cdf(math.floor(over / deff + 1e-9) - 1, math.ceil(n / deff - 1e-9), tail) <= ALPHA:
        verdict = "out"
    else:
        verdict = "unclear"
    return BoundCheck(name, quantile, bound_s, n, over, verdict, deff)


def design_effect(past_in_order: np.ndarray) -> float:
    """Variance over mean of the counts over the bound in consecutive blocks of requests (send order),
    at least 1: how much more the count varies than independent draws would make it (batch means).
    The blocks are cut twice, the second time shifted by half a block, and the larger ratio is kept:
    a burst that straddles a block boundary is seen whole in one of the two. One level's case of
    pooled_design_effect."""
    return pooled_design_effect([past_in_order])


def pooled_design_effect(levels_in_order: list[np.ndarray]) -> float:
    """The design effect of several levels' over-the-bound flags (each in send order) together: per
    level, the squared deviations of its blocks' counts from its own mean; over all levels, their sum
    over what Poisson counts at those means would give (sum of (blocks - 1) x mean). Both cuts of
    `design_effect` are pooled apart and the larger kept. At least 1; 1 where nothing was over."""
    ratios = []
    for shift in (False, True):
        ss = expected = 0.0
        for past in levels_in_order:
            blocks = min(BLOCKS, past.size // 10)
            if blocks < 2 or not past.any():
                continue
            past = past.astype(float)
            if shift:
                half = past.size // blocks // 2
                past, blocks = past[half : past.size - (past.size // blocks - half)], blocks - 1
                if blocks < 2:
                    continue
            counts = np.array([b.sum() for b in np.array_split(past, blocks)])
            ss += float(((counts - counts.mean()) ** 2).sum())
            expected += (blocks - 1) * float(counts.mean())
        ratios.append(ss / expected if expected > 0 else 1.0)
    return max(1.0, *ratios)


def binom_cdf(k: int, n: int, p: float) -> float:
    """P[Binomial(n, p) <= k], summed in log space (n in the thousands stays exact enough)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
        for i in range(k + 1)
    ]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))
