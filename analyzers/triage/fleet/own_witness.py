"""What of its own slows a replica of a fleet now and then, and so leaves its median request about as
fast as the others' (docs/diagnosis.md, p99.fleet.hot-replica): its own queue behind a smaller KV cache
(own_queue.py), a neighbour on its own cores (own_cores.py), or, where neither was read, the tail's
separate episodes falling on it far beyond its share of the requests (tail_episodes.py). Each speaks
only for a replica sent alike (no larger share of the requests, no heavier ones: residence.py), so
that what it shows is the replica's and not its routing's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.triage.contracts import CONTEXT_SHARE, Finding
from analyzers.triage.fleet.concentration import ReplicaShare
from analyzers.triage.fleet.imbalance import QUEUE_FINDINGS
from analyzers.triage.fleet.own_cores import OWN_CORES_KEY, starved_alone
from analyzers.triage.fleet.own_queue import OWN_QUEUE_KEY, queued_on_its_own
from analyzers.triage.fleet.per_engine import ReplicaGauges
from analyzers.triage.fleet.residence import sent_alike
from analyzers.triage.fleet.tail_episodes import EPISODES_P, beyond_chance
from analyzers.triage.host.neighbour import CPU_ID
from analyzers.triage.server import PREEMPT_ID

HOT_ID = "p99.fleet.hot-replica"  # the check these witnesses speak for (hot_replica.py)
OWN_TAIL_KEY = "made_the_tails_episodes"  # the hot-replica finding's evidence: True where it did
WITNESSES = {OWN_QUEUE_KEY: "own queue", OWN_CORES_KEY: "own cores", OWN_TAIL_KEY: "its tail"}


def own_witness(
    gauges: dict[str, ReplicaGauges],
    waits: dict[str, float],
    episodes: np.ndarray,
    heavier: float,
    top: ReplicaShare,
    shares: list[ReplicaShare],
    r: int,
) -> tuple[str | None, dict]:
    """What of its own slows the replica `top` (index r) now and then, strongest first, and the evidence
    of each: its own queue (own_queue.py), its own cores (own_cores.py), or the tail's episodes beyond
    chance (tail_episodes.py); each only where it was sent alike (residence.sent_alike)."""
    alike = sent_alike(heavier, top, shares)
    p = beyond_chance(episodes, r, top.request_share)
    found = {
        OWN_QUEUE_KEY: queued_on_its_own(gauges, heavier, top, shares),
        OWN_CORES_KEY: alike and starved_alone(waits, top.replica),
        OWN_TAIL_KEY: alike and p <= EPISODES_P,
    }
    witness = next((WITNESSES[k] for k, v in found.items() if v), None)
    episodes_evidence = {
        "tail_episodes": {s.replica: int(e) for s, e in zip(shares, episodes)},
        "tail_episodes_p": float(f"{p:.3g}"),
    }
    return witness, {**found, **episodes_evidence}


@dataclass(frozen=True)
class Mechanism:
    """The findings a witness makes the replica's mechanism rather than a cause of their own: read off
    the fleet's summed gauges (a queue) or the first URL's process (a neighbour), they name no replica."""

    check_ids: tuple[str, ...]
    evidence_key: str  # names the replica in their evidence
    words: str  # what their title adds: "(replica 1's <words>: p99.fleet.hot-replica)"


MECHANISMS = {
    OWN_QUEUE_KEY: Mechanism((*QUEUE_FINDINGS, PREEMPT_ID), "queue_was_replica", "own queue, its KV cache the smaller"),
    OWN_CORES_KEY: Mechanism((CPU_ID,), "cores_were_replica", "cores, whose threads alone waited"),
}


def own_witness_yields(findings: list[Finding]) -> None:
    """Beside a hot-replica finding named by its own queue or its own cores, the findings of that
    mechanism explain none of the tail (context), and say whose they were. (The tail's episodes name
    no mechanism: nothing yields to them.)"""
    for key, mechanism in MECHANISMS.items():
        own = [
            f
            for f in findings
            if f.check_id == HOT_ID and f.evidence.get(key) and (f.tail_share or 0.0) >= CONTEXT_SHARE
        ]
        if not own:
            continue
        replica = own[0].evidence["replica"]
        for f in findings:
            if f.check_id in mechanism.check_ids:
                f.tail_share = 0.0
                f.evidence[mechanism.evidence_key] = replica
                f.title = f"{f.title} (replica {replica}'s {mechanism.words}: {HOT_ID})"
