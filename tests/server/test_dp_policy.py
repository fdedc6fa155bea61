"""The data-parallel front's load-balancing policies, as pure bookkeeping (no servers)."""

from __future__ import annotations

import pytest

from refengine.server.dp_policy import LoadBalancer, ReplicaLoad


def test_round_robin_cycles_over_eligible_replicas():
    lb = LoadBalancer(3, "round-robin")
    assert [lb.pick({0, 1, 2}) for _ in range(6)] == [0, 1, 2, 0, 1, 2]


def test_round_robin_skips_a_replica_that_is_down():
    lb = LoadBalancer(3, "round-robin")
    assert [lb.pick({0, 2}) for _ in range(4)] == [0, 2, 0, 2]


def test_no_eligible_replica_is_none():
    assert LoadBalancer(2).pick(set()) is None


def test_least_outstanding_sends_to_the_idle_replica():
    lb = LoadBalancer(2, "least-outstanding")
    first = lb.pick({0, 1})
    lb.started(first)                       # a long request holds it
    others = []
    for _ in range(3):
        i = lb.pick({0, 1})
        lb.started(i)
        others.append(i)
        lb.finished(i)                      # short requests end before the next one
    assert others == [1 - first] * 3
    assert lb.loads[first].in_flight == 1 and lb.loads[1 - first].routed == 3


def test_least_outstanding_ties_go_round_robin():
    lb = LoadBalancer(3, "least-outstanding")
    picks = [lb.pick({0, 1, 2}) for _ in range(3)]      # nothing started: all tie
    assert sorted(picks) == [0, 1, 2]


def test_invariants():
    with pytest.raises(ValueError):
        LoadBalancer(0)
    with pytest.raises(ValueError):
        LoadBalancer(2, "random")
    with pytest.raises(ValueError):
        LoadBalancer(2).finished(0)         # finishing what never started would go negative
    with pytest.raises(ValueError):
        ReplicaLoad(in_flight=-1)
