"""Per-replica statistics of a level: how a fleet shared the load, and whether one replica is the tail.

A fleet (a router over N engine replicas) is measured as one target; the records say which replica
served each request (RequestRecord.replica). Per level and replica: the requests sent in the
measured window that it served, its TTFT P99 (with the sample count: fewer than 100 is flagged as
everywhere), and its share of the level's requests and of their output tokens. A balanced fleet
has equal shares; a replica whose TTFT P99 stands apart is where the level's tail comes from.
Levels whose records name no replica have no rows here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from analyzers.stats.distribution import MIN_SAMPLES_FOR_P99
from rundir.table import RequestTable


@dataclass(frozen=True)
class ReplicaShare:
    level_id: str
    replica: str
    requests: int  # in-window requests it served (any status)
    ok: int
    ttft_p99_s: float | None  # over its ok requests; None without any
    request_share: float  # of the level's in-window requests that name a replica
    token_share: float  # of their output tokens

    def __post_init__(self) -> None:
        if not 0 <= self.ok <= self.requests:
            raise ValueError(f"replica {self.replica}: {self.ok} ok of {self.requests} requests")
        for name in ("request_share", "token_share"):
            if not 0.0 <= getattr(self, name) <= 1.0 + 1e-9:
                raise ValueError(f"replica {self.replica}: {name} {getattr(self, name)} is not a share")

    @property
    def p99_reliable(self) -> bool:
        return self.ok >= MIN_SAMPLES_FOR_P99

    def to_dict(self) -> dict:
        return {**asdict(self), "p99_reliable": self.p99_reliable}


def _replica_order(name: str) -> tuple[int, int | str]:
    """Numeric replica names (the fleet's indices) in numeric order, then the others by name."""
    return (0, int(name)) if name.isdigit() else (1, name)


def level_replicas(table: RequestTable, rows: np.ndarray, level_id: str) -> list[ReplicaShare]:
    df = table.df
    win = df["in_window"].to_numpy(bool)[rows]
    names = df["replica"].to_numpy(object)[rows]
    named = win & np.array([n is not None and n == n for n in names], dtype=bool)  # n == n: not NaN
    if not named.any():
        return []
    ok = (df["status"].to_numpy(object)[rows] == "ok") & named
    ttft = df["ttft_s"].to_numpy(float)[rows]
    tokens = df["out_tokens"].to_numpy(float)[rows]
    total_requests, total_tokens = int(named.sum()), float(tokens[named].sum())
    out = []
    for name in sorted({str(n) for n in names[named]}, key=_replica_order):
        mine = named & (names == name)
        ttfts = ttft[ok & mine]
        ttfts = ttfts[np.isfinite(ttfts)]
        out.append(
            ReplicaShare(
                level_id=level_id,
                replica=name,
                requests=int(mine.sum()),
                ok=int((ok & mine).sum()),
                ttft_p99_s=float(np.percentile(ttfts, 99, method="linear")) if ttfts.size else None,
                request_share=int(mine.sum()) / total_requests,
                token_share=float(tokens[mine].sum()) / total_tokens if total_tokens > 0 else 0.0,
            )
        )
    return out


def run_replicas(table: RequestTable, level_order: list[str]) -> list[ReplicaShare]:
    """Every level's replicas, levels in `level_order`."""
    by_level = table.level_rows()
    return [
        share
        for level_id in level_order
        if level_id in by_level
        for share in level_replicas(table, by_level[level_id], level_id)
    ]
