"""Where a fleet's tail lies: each replica's share of the measured requests against its share of the tail.

The tail is exposure.py's: the requests above their level's TAIL_QUANTILE. A replica that served
half the requests and half the tail is no more the tail than any other; one that served half the
requests and nine tenths of the tail is where the tail comes from (why is the hot-replica and
imbalance checks' question: slower, or merely busier).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.triage.tail_windows import TAIL_QUANTILE


@dataclass(frozen=True)
class ReplicaShare:
    replica: str
    requests: int  # measured requests it served
    tail: int  # of them in the tail
    request_share: float  # of the measured requests that name a replica
    tail_share: float  # of the tail requests that name a replica

    def __post_init__(self) -> None:
        if not 0 <= self.tail <= self.requests:
            raise ValueError(f"replica {self.replica}: {self.tail} tail requests of {self.requests}")
        for v in (self.request_share, self.tail_share):
            if not 0.0 <= v <= 1.0 + 1e-9:
                raise ValueError(f"replica {self.replica}: {v} is not a share")

    @property
    def concentration(self) -> float:
        """Its share of the tail over its share of the requests (1: no more than its due)."""
        return self.tail_share / self.request_share if self.request_share > 0 else 0.0


def tail_mask(values: np.ndarray, rows_by_level: dict[str, np.ndarray], measured: np.ndarray) -> np.ndarray:
    """The measured rows above their level's TAIL_QUANTILE (exposure.py's tail)."""
    tail = np.zeros(values.shape, dtype=bool)
    for rows in rows_by_level.values():
        rows = rows[measured[rows]]
        if rows.size:
            tail[rows[values[rows] > float(np.percentile(values[rows], TAIL_QUANTILE))]] = True
    return tail


def replica_shares(replica: np.ndarray, names: list[str], measured: np.ndarray, tail: np.ndarray) -> list[ReplicaShare]:
    """Each replica's share of the measured requests and of the tail; `replica` indexes `names` (-1: none)."""
    named = measured & (replica >= 0)
    n, n_tail = int(named.sum()), int((named & tail).sum())
    out = []
    for r, name in enumerate(names):
        mine = named & (replica == r)
        k, k_tail = int(mine.sum()), int((mine & tail).sum())
        out.append(ReplicaShare(name, k, k_tail, k / n if n else 0.0, k_tail / n_tail if n_tail else 0.0))
    return out
