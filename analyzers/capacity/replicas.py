"""A fleet's capacity answer in replicas: the capacity per replica, and the replicas a target rate needs.

A fleet of N replicas (run.json's target.replicas) is measured as one target, so its capacity answer
(analyzers/capacity/answer.py) is the fleet's. Per replica it is the fleet's / N: what each replica
carried at the measured balance (the busiest replica's share of the answer's requests says how even
that was), not what one replica alone would carry. The replicas a target rate needs come from the
rate one replica carried within the SLO: the capacity itself on the rate axis, the goodput at the
capacity on the concurrency axis (the requests/s that met the SLO there), each over N; the count is
the target over that, rounded up, and on the rate axis its interval's ends give a range. Words are
reports/replicas_words.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rundir.capacity import CapacityAnswer
from rundir.table import RequestTable


@dataclass(frozen=True)
class PerReplica:
    """The fleet's answer divided by its replicas (the fleet's / N, at the measured balance)."""

    replicas: int
    axis: str  # concurrency | rate
    capacity: float | None  # users or req/s per replica
    low: float | None
    high: float | None
    rate_req_s: float | None  # requests/s one replica carried within the SLO (see the module)
    busiest_share: float | None  # at the answer's load: the largest share one replica served

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"a fleet has at least one replica, got {self.replicas}")
        if self.busiest_share is not None and not 1 / self.replicas - 1e-9 <= self.busiest_share <= 1 + 1e-9:
            raise ValueError(f"the busiest of {self.replicas} replicas served {self.busiest_share:.3f} of the requests")


@dataclass(frozen=True)
class ReplicasFor:
    """The replicas a target rate needs, from the measured per-replica rate."""

    target_rate: float
    measured_replicas: int
    per_replica_req_s: float | None  # None: the search established no rate within the SLO
    replicas: int | None
    fewest: int | None  # from the interval's high end (rate axis), else None
    most: int | None  # from its low end

    def __post_init__(self) -> None:
        if not self.target_rate > 0:
            raise ValueError(f"a target rate is > 0 requests/s, got {self.target_rate}")

    @property
    def extrapolated(self) -> bool:
        """The count is not the fleet size that was measured."""
        return self.replicas is not None and self.replicas != self.measured_replicas


def with_fleet(answer: CapacityAnswer, table: RequestTable, replicas: int) -> CapacityAnswer:
    """The answer with the fleet's size and, at the capacity's load, how evenly its replicas shared it."""
    answer.replicas = replicas
    at = next((v for v in answer.loads if v.load == answer.capacity), None)
    answer.busiest_share = busiest_share(table, at.level_ids) if replicas > 1 and at is not None else None
    return answer


def busiest_share(table: RequestTable, level_ids: list[str]) -> float | None:
    """The largest share of the levels' in-window requests that one replica served (None: no record names one)."""
    df = table.df
    rows = df["in_window"].to_numpy(bool) & np.isin(df["level_id"].to_numpy(), level_ids)
    names = [n for n in df["replica"].to_numpy(object)[rows] if n is not None and n == n]  # n == n: not NaN
    if not names:
        return None
    _, counts = np.unique(np.array([str(n) for n in names]), return_counts=True)
    return float(counts.max() / counts.sum())


def per_replica(answer: CapacityAnswer) -> PerReplica:
    n = answer.replicas

    def each(v: float | None) -> float | None:
        return None if v is None else v / n

    rate = answer.capacity if answer.axis == "rate" else answer.goodput_req_s
    share = answer.busiest_share if n > 1 else None
    return PerReplica(n, answer.axis, each(answer.capacity), each(answer.low), each(answer.high), each(rate), share)


def replicas_for(target_rate: float, each: PerReplica) -> ReplicasFor:
    def count(per: float | None) -> int | None:
        return None if per is None or per <= 0 else max(1, math.ceil(target_rate / per - 1e-9))

    interval = each.axis == "rate"
    return ReplicasFor(
        target_rate,
        each.replicas,
        each.rate_req_s,
        count(each.rate_req_s),
        count(each.high) if interval else None,
        count(each.low) if interval else None,
    )
