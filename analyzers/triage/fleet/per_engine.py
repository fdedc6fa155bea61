"""What the server probe read of each replica of a fleet: its KV cache and its queue.

A data-parallel server's /metrics carries every engine's series under an `engine` label, and the
server probe keeps each engine's running, waiting and KV usage as `per_engine` (docs/probes.md;
refengine's fleet front labels its replicas by index, the value of its replica header too). Over
the probe intervals of the measured span: each replica's mean KV usage, the share of the scrapes
in which it had requests waiting with its KV cache full, its mean queue, and how many requests its KV
cache holds (room_requests: requests running over the share of the cache they use; replicas sent
alike requests use alike shares per request, so a smaller cache shows as fewer). Full is the
standing-tail analysis's rule: >= KV_FULL, or full *for the next request* (the free part smaller
than one running request's share, usage / running: 10 of 12 blocks used by 3 requests of 4 blocks
leave no room for a fourth at 83%). A fleet driven URL by URL (`llmbench sweep --target URL1,URL2`)
has the same keys when the probe read each URL's own page (docs/probes.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.probe_series import ProbeSeries
from analyzers.triage.tail_windows import Window

KV_FULL = 0.95  # the KV-full threshold of the standing-tail analysis (docs/diagnosis.md)
# A replica queued behind its own full KV cache in at least this share of the scrapes while every other
# replica did in at most OTHERS_QUEUE: the queue is its own (queued_alone).
OWN_QUEUE = 0.2
OTHERS_QUEUE = 0.05
# A cache that holds at most 1 / LESS_ROOM of the requests each other replica's holds is smaller. A
# request's share grows as it decodes (32 + 32 tokens: from 2 blocks of 16 to 4), so one scrape can read
# an equal cache up to twice as roomy as another; the medians over a level's scrapes scatter far less.
LESS_ROOM = 1.5


@dataclass(frozen=True)
class ReplicaGauges:
    replica: str
    scrapes: int
    kv_usage_mean: float | None
    waiting_mean: float | None
    full_and_waiting_share: float | None  # scrapes with requests waiting while its KV cache was full
    room_requests: float | None = None  # median over scrapes with requests running: running / KV usage

    def __post_init__(self) -> None:
        if self.scrapes <= 0:
            raise ValueError(f"replica {self.replica}: gauges need at least one scrape")
        if self.full_and_waiting_share is not None and not 0.0 <= self.full_and_waiting_share <= 1.0:
            raise ValueError(f"replica {self.replica}: {self.full_and_waiting_share} is not a share")
        if self.room_requests is not None and not self.room_requests > 0:
            raise ValueError(f"replica {self.replica}: a KV cache holds some requests, not {self.room_requests}")

    def evidence(self) -> dict:
        return {
            "kv_usage_mean": _round(self.kv_usage_mean),
            "waiting_mean": _round(self.waiting_mean),
            "kv_full_and_waiting_share": _round(self.full_and_waiting_share),
            "kv_room_requests": _round(self.room_requests),
        }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def replica_gauges(server: ProbeSeries | None, replicas: list[str], span: Window) -> dict[str, ReplicaGauges]:
    """Each replica's gauges over the probe rows inside `span`; replicas the probe never named are left out."""
    if server is None or not len(server):
        return {}
    inside = (server.t >= span.start) & (server.t <= span.end + 1.0)
    out = {}
    for name in replicas:
        kv = server.numeric.get(f"per_engine.{name}.kv_usage")
        waiting = server.numeric.get(f"per_engine.{name}.waiting")
        running = server.numeric.get(f"per_engine.{name}.running")
        if kv is None and waiting is None:
            continue
        rows = inside & np.isfinite(kv if kv is not None else waiting)  # type: ignore[arg-type]
        if not rows.any():
            continue
        kv_mean = float(np.nanmean(kv[rows])) if kv is not None else None
        wait_mean = float(np.nanmean(waiting[rows])) if waiting is not None else None
        full = None
        if kv is not None and waiting is not None:
            full = float(np.mean(_full(kv[rows], running[rows] if running is not None else None) & (waiting[rows] > 0)))
        room = _room(kv[rows], running[rows]) if kv is not None and running is not None else None
        out[name] = ReplicaGauges(name, int(rows.sum()), kv_mean, wait_mean, full, room)
    return out


def _room(kv: np.ndarray, running: np.ndarray) -> float | None:
    """How many requests the KV cache holds, as the scrapes with requests running show it."""
    held = np.isfinite(kv) & np.isfinite(running) & (running > 0) & (kv > 0)
    return float(np.median(running[held] / kv[held])) if held.any() else None


def _full(kv: np.ndarray, running: np.ndarray | None) -> np.ndarray:
    """KV full, or full for the next request: less free than one running request's share."""
    full = kv >= KV_FULL
    if running is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(running > 0, kv / np.where(running > 0, running, 1.0), 0.0)  # none running: no share
        full |= (1.0 - kv) < share
    return full


def queued_alone(gauges: dict[str, ReplicaGauges], replica: str) -> bool:
    """Did `replica` have requests waiting with its KV cache full in OWN_QUEUE or more of the scrapes while
    every other replica (at least one, each read) did in at most OTHERS_QUEUE?"""
    hot = gauges.get(replica)
    rest = [g.full_and_waiting_share for k, g in gauges.items() if k != replica]
    if hot is None or hot.full_and_waiting_share is None or not rest or any(v is None for v in rest):
        return False
    return hot.full_and_waiting_share >= OWN_QUEUE and max(v for v in rest if v is not None) <= OTHERS_QUEUE


def less_room(gauges: dict[str, ReplicaGauges], replica: str) -> bool:
    """Does `replica`'s KV cache hold at most 1 / LESS_ROOM of the requests each other replica's holds
    (every replica's room read)? A queue that formed where the users went (a closed loop handed it one
    more) forms in a cache as large as the others'."""
    hot = gauges.get(replica)
    rest = [g.room_requests for k, g in gauges.items() if k != replica]
    if hot is None or hot.room_requests is None or not rest or any(v is None for v in rest):
        return False
    return hot.room_requests * LESS_ROOM <= min(v for v in rest if v is not None)


def gauges_words(hot: ReplicaGauges, others: list[ReplicaGauges]) -> str | None:
    """'replica 1 waited with its KV cache full in 80% of the scrapes (2.1 waiting on average) while
    replica 0's was 35% full on average with 0.0 waiting'; None without the numbers to say it."""
    if hot.full_and_waiting_share is None or hot.kv_usage_mean is None or not others:
        return None
    rest = [g for g in others if g.kv_usage_mean is not None]
    if not rest:
        return None
    their = "; ".join(
        f"replica {g.replica}'s was {g.kv_usage_mean:.0%} full on average"
        + (f" with {g.waiting_mean:.1f} waiting" if g.waiting_mean is not None else "")
        for g in rest
    )
    if hot.full_and_waiting_share > 0:
        mine = (
            f"replica {hot.replica} had requests waiting with its KV cache full in "
            f"{hot.full_and_waiting_share:.0%} of the scrapes"
            + (f" ({hot.waiting_mean:.1f} waiting on average)" if hot.waiting_mean is not None else "")
        )
        return f"{mine}, while {their}"
    return (
        f"replica {hot.replica}'s KV cache was {hot.kv_usage_mean:.0%} full on average, never full with "
        f"requests waiting, while {their}: not a smaller KV cache"
    )


@dataclass(frozen=True)
class QueueWithRoom:
    """Scrapes in which some replica had requests waiting, and how many of them another replica had room
    in then (nothing waiting, fewer running than the most it ever ran): a queue a router looking at
    the replicas would not have made."""

    waiting_scrapes: int
    with_room: int

    def __post_init__(self) -> None:
        if not 0 <= self.with_room <= self.waiting_scrapes:
            raise ValueError(f"{self.with_room} of {self.waiting_scrapes} scrapes")

    @property
    def share(self) -> float:
        return self.with_room / self.waiting_scrapes if self.waiting_scrapes else 0.0


def queue_with_room(server: ProbeSeries | None, replicas: list[str], span: Window) -> QueueWithRoom | None:
    """Over the probe rows inside `span`; None without each replica's running and waiting."""
    if server is None or not len(server):
        return None
    running = [server.numeric.get(f"per_engine.{r}.running") for r in replicas]
    waiting = [server.numeric.get(f"per_engine.{r}.waiting") for r in replicas]
    if any(v is None for v in running) or any(v is None for v in waiting):
        return None
    run = np.vstack([v for v in running if v is not None])  # (replicas, scrapes)
    wait = np.vstack([v for v in waiting if v is not None])
    inside = (
        (server.t >= span.start) & (server.t <= span.end + 1.0) & np.isfinite(run).all(0) & np.isfinite(wait).all(0)
    )
    most = np.nanmax(np.where(inside, run, np.nan), axis=1, initial=0.0)[:, None]
    room = (wait == 0) & (run < most)  # a replica with room has nothing waiting: never one that queued
    queued = inside & (wait > 0).any(0)
    return QueueWithRoom(int(queued.sum()), int((queued & room.any(0)).sum()))
