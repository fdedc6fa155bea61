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

from analyzers.triage.fleet.concentration import ReplicaShare
from analyzers.triage.fleet.per_engine import ReplicaGauges, less_room, queued_alone
from analyzers.triage.fleet.residence import sent_alike

OWN_QUEUE_KEY = "queued_behind_its_own_kv_cache"  # the hot-replica finding's evidence: True where it did


def queued_on_its_own(
    gauges: dict[str, ReplicaGauges], heavier: float, top: ReplicaShare, shares: list[ReplicaShare]
) -> bool:
    """Was `top` sent alike (residence.sent_alike), did it alone queue behind a full KV cache
    (per_engine.queued_alone), and does its cache hold fewer requests than each other's (less_room)?"""
    return sent_alike(heavier, top, shares) and queued_alone(gauges, top.replica) and less_room(gauges, top.replica)
