"""The findings of a hot replica's own mechanism yield to it (analyzers/triage/fleet/own_witness.py): the
fleet's queue findings beside a replica named by its own queue, the host's neighbour beside one named
by its own cores; each says whose it was."""

from __future__ import annotations

import pytest

from analyzers.triage.contracts import Finding
from analyzers.triage.fleet.own_cores import OWN_CORES_KEY
from analyzers.triage.fleet.own_queue import OWN_QUEUE_KEY
from analyzers.triage.fleet.own_witness import own_witness_yields


def _finding(check_id: str, category: str, share: float, **evidence) -> Finding:
    return Finding(check_id, category, "high", check_id, evidence, [], 0, "", tail_share=share)


def test_the_fleets_findings_of_a_replicas_own_queue_become_context_beside_it():
    hot = _finding("p99.fleet.hot-replica", "fleet", 0.86, replica="1", **{OWN_QUEUE_KEY: True})
    preempt = _finding("p99.sched.preemption", "scheduling", 0.96, preemptions=20)
    kv = _finding("p99.sched.kv-capacity", "scheduling", 1.0, kv_usage_peak=1.0)
    neighbour = _finding("p99.host.cpu", "host", 0.4, cpu_cores=1.0)
    own_witness_yields([hot, preempt, kv, neighbour])
    assert preempt.tail_share == kv.tail_share == 0.0
    assert preempt.evidence["queue_was_replica"] == kv.evidence["queue_was_replica"] == "1"
    assert preempt.title.endswith("(replica 1's own queue, its KV cache the smaller: p99.fleet.hot-replica)")
    assert hot.tail_share == 0.86 and neighbour.tail_share == 0.4


def test_the_hosts_neighbour_becomes_context_beside_the_replica_whose_cores_it_took():
    hot = _finding("p99.fleet.hot-replica", "fleet", 0.9, replica="0", **{OWN_CORES_KEY: True})
    neighbour = _finding("p99.host.cpu", "host", 1.0, others_cpu_cores=0.7)
    queue = _finding("p99.sched.queueing", "scheduling", 0.5, waiting=1.2)
    own_witness_yields([hot, neighbour, queue])
    assert neighbour.tail_share == 0.0 and neighbour.evidence["cores_were_replica"] == "0"
    assert neighbour.title.endswith("(replica 0's cores, whose threads alone waited: p99.fleet.hot-replica)")
    assert hot.tail_share == 0.9 and queue.tail_share == 0.5


@pytest.mark.parametrize(
    "key, check_id, category, said",
    [
        # A slower build, or a cache as roomy as the others': the queue may be the fleet's.
        (OWN_QUEUE_KEY, "p99.sched.preemption", "scheduling", "queue_was_replica"),
        # Named by its latencies alone: the neighbour may be on the other replica's cores too.
        (OWN_CORES_KEY, "p99.host.cpu", "host", "cores_were_replica"),
    ],
)
def test_a_hot_replica_named_without_that_mechanism_leaves_its_findings_standing(key, check_id, category, said):
    hot = _finding("p99.fleet.hot-replica", "fleet", 0.9, replica="0", **{key: False})
    other = _finding(check_id, category, 0.96, seen=1.0)
    own_witness_yields([hot, other])
    assert other.tail_share == 0.96 and said not in other.evidence
