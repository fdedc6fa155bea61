"""Little's law for a replica of a fleet: sent no more requests and no heavier ones, a replica holds
more in flight only by keeping each request longer.

In flight = arrivals x time in the system. Where a replica was sent no larger share of the requests
than the others (at most EVEN_SLACK above) and no heavier ones (mean work under HEAVIER times
theirs, work.py), more requests in flight on it are its own slowness, not its routing: a closed loop
driven in turn piles the users onto the slow replica, beyond any load the others carried, and a
replica that queues (a small KV cache) is slow by holding more, which comparing it at equal holdings
hides (docs/diagnosis.md, p99.fleet.hot-replica).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from analyzers.triage.fleet.concentration import ReplicaShare

# Residence is slowness itself (no more requests, no heavier ones): it needs only to be material and
# more than the shuffle of which replica served which request would give (a permutation test).
RESIDENCE_RATIO = 1.2
RESIDENCE_P = 0.01
PERMUTATIONS = 2000
SHUFFLE_CHUNK = 200
HEAVIER = 1.25  # its requests' mean work (work.py) over the others': it was handed heavier work
EVEN_SLACK = 0.05  # a request share at most this above the others' is no larger share


def sent_alike(heavier: float, top: ReplicaShare, shares: list[ReplicaShare]) -> bool:
    """Was the replica `top` sent no larger share of the requests than the others and no heavier ones?"""
    other_shares = [s.request_share for s in shares if s.replica != top.replica]
    return heavier < HEAVIER and bool(other_shares) and top.request_share <= max(other_shares) + EVEN_SLACK


@dataclasses.dataclass(frozen=True)
class Residence:
    ratio: float  # its mean E2E over the others', per unit of work
    p_value: float  # one-sided: a ratio this high from shuffling which replica served which request

    def __post_init__(self) -> None:
        if not self.ratio >= 0 or not 0.0 < self.p_value <= 1.0:
            raise ValueError(f"a residence needs a ratio >= 0 and a p-value in (0, 1], got {self}")

    @property
    def holds(self) -> bool:
        return self.ratio >= RESIDENCE_RATIO and self.p_value <= RESIDENCE_P


def residence(
    e2e: np.ndarray,
    measured: np.ndarray,
    mine: np.ndarray,
    others: np.ndarray,
    heavier: float,
    top: ReplicaShare,
    shares: list[ReplicaShare],
) -> Residence | None:
    """How much longer its requests stayed on it than the others' did on theirs, per unit of work
    (work.py); None unless it was sent alike (sent_alike)."""
    if not sent_alike(heavier, top, shares):
        return None
    ok_mine, ok_others = mine & measured & np.isfinite(e2e), others & np.isfinite(e2e)
    if not ok_mine.any() or not ok_others.any():
        return None
    a, b = e2e[ok_mine], e2e[ok_others]
    if float(np.mean(b)) <= 0:
        return None
    observed = float(np.mean(a)) / float(np.mean(b))
    # Shuffle which replica served which request (seeded: the same run gives the same verdict), a
    # chunk of shuffles at a time so a fleet of many requests does not hold them all at once.
    pooled, rng, above = np.concatenate([a, b]), np.random.default_rng(0), 0
    total = float(pooled.sum())
    for n in np.diff(np.r_[0:PERMUTATIONS:SHUFFLE_CHUNK, PERMUTATIONS]):
        mine_sum = rng.permuted(np.tile(pooled, (n, 1)), axis=1)[:, : a.size].sum(axis=1)
        ratios = (mine_sum / a.size) / np.maximum((total - mine_sum) / b.size, 1e-12)
        above += int(np.count_nonzero(ratios >= observed))
    p_value = (1 + above) / (PERMUTATIONS + 1)
    return Residence(observed / max(heavier, 1e-9), p_value)
