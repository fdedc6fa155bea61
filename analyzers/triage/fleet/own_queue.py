"""A replica's queue of its own: sent alike, it queued behind its own full KV cache where no other
replica did, in a cache that holds fewer requests than each other's (docs/diagnosis.md,
p99.fleet.hot-replica).

Its scheduler's gauges say directly what the latency comparisons need many requests to see: its
cache is smaller. (Equal replicas, one of which a closed loop by chance handed a user more, queue
alone too, but in a cache as roomy as the others'.) The fleet-wide findings of that queue, read off
the fleet's summed gauges (a full KV cache, preemptions, queueing, saturation), are then that
replica's mechanism, not a second cause: they yield to the hot-replica finding, which names the
replica and its cache.
"""

from __future__ import annotations

from analyzers.triage.contracts import CONTEXT_SHARE, Finding
from analyzers.triage.fleet.concentration import ReplicaShare
from analyzers.triage.fleet.imbalance import QUEUE_FINDINGS
from analyzers.triage.fleet.per_engine import ReplicaGauges, less_room, queued_alone
from analyzers.triage.fleet.residence import sent_alike
from analyzers.triage.server import PREEMPT_ID

HOT_ID = "p99.fleet.hot-replica"  # the check whose finding names the replica (hot_replica.py)
OWN_QUEUE_KEY = "queued_behind_its_own_kv_cache"  # the hot-replica finding's evidence: True where it did


def queued_on_its_own(
    gauges: dict[str, ReplicaGauges], heavier: float, top: ReplicaShare, shares: list[ReplicaShare]
) -> bool:
    """Was `top` sent alike (residence.sent_alike), did it alone queue behind a full KV cache
    (per_engine.queued_alone), and does its cache hold fewer requests than each other's (less_room)?"""
    return sent_alike(heavier, top, shares) and queued_alone(gauges, top.replica) and less_room(gauges, top.replica)


def own_queue_yields(findings: list[Finding]) -> None:
    """The fleet-wide findings of a queue that one replica's small cache made explain none of the tail
    beside the hot-replica finding that names it (`queue_was_replica`)."""
    own = [
        f
        for f in findings
        if f.check_id == HOT_ID and f.evidence.get(OWN_QUEUE_KEY) and (f.tail_share or 0.0) >= CONTEXT_SHARE
    ]
    if not own:
        return
    replica = own[0].evidence["replica"]
    for f in findings:
        if f.check_id in (*QUEUE_FINDINGS, PREEMPT_ID):
            f.tail_share = 0.0
            f.evidence["queue_was_replica"] = replica
            # Read as context, it says whose it was: the summed gauges name no replica.
            f.title = f"{f.title} (replica {replica}'s own queue, its KV cache the smaller: {HOT_ID})"
