"""How many separate episodes of the tail each replica of a fleet had, and whether one replica had more
of them than its share of the requests makes likely by chance.

A replica that something slows now and then (a neighbour on its host, a GPU throttling, a pause) makes
its tail in bursts and leaves its median request as fast as the others': the latency comparisons at
the median miss it, and a fleet driven from another host has no per-replica wait to read (own_cores.py).
Where the tail lies says it: a replica that served half the requests and 17 of the 18 separate
slow episodes is where the tail comes from. Episodes, not requests: the tail requests of one stall
overlap in time and are one event, and counted one by one they would make a single pause of a
healthy replica look beyond chance. An episode is a run of a replica's tail requests whose latency
windows overlap. One-sided binomial test of its episodes against its share of the requests; the
fleet family's clean draws (seeds 7-11, 15 of them, each replica's client and core shared alike)
read p >= 0.012, its burner-slowed replicas p <= 7e-5.
"""

from __future__ import annotations

import numpy as np

from analyzers.stats.exceedance import binom_cdf

EPISODES_P = 0.001  # a replica's share of the tail's episodes this unlikely by chance is its own


def tail_episodes(starts: np.ndarray, ends: np.ndarray, tail: np.ndarray, replica: np.ndarray, n: int) -> np.ndarray:
    """(n,) episodes of the tail per replica: runs of its tail rows whose [start, end] windows overlap
    (`replica` indexes 0..n-1, -1 for none)."""
    out = np.zeros(n, dtype=int)
    for r in range(n):
        rows = np.flatnonzero(tail & (replica == r) & np.isfinite(starts) & np.isfinite(ends))
        reach = -np.inf
        for i in rows[np.argsort(starts[rows], kind="stable")]:
            out[r] += starts[i] > reach
            reach = max(reach, ends[i])
    return out


def beyond_chance(episodes: np.ndarray, r: int, request_share: float) -> float:
    """P[at least episodes[r] of the episodes fall on replica r] if each fell there with its share of the
    requests (1.0 without episodes)."""
    n, k = int(episodes.sum()), int(episodes[r])
    if n == 0 or k == 0 or not 0.0 < request_share < 1.0:
        return 1.0
    # P[X >= k] for X ~ Bin(n, p) is P[Y <= n - k] for Y ~ Bin(n, 1 - p): no cancellation near zero.
    return binom_cdf(n - k, n, 1.0 - request_share)
