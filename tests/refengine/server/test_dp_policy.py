"""The data-parallel front's load-balancing policies and GPU placement, as pure bookkeeping (no servers)."""

from __future__ import annotations

import pytest

from refengine.server.dp_policy import LoadBalancer, ReplicaLoad
from refengine.server.dp_replicas import cpu_slices, gpu_slices, replica_threads, visible_gpus


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
    lb.started(first)  # a long request holds it
    others = []
    for _ in range(3):
        i = lb.pick({0, 1})
        lb.started(i)
        others.append(i)
        lb.finished(i)  # short requests end before the next one
    assert others == [1 - first] * 3
    assert lb.loads[first].in_flight == 1 and lb.loads[1 - first].routed == 3


def test_least_outstanding_ties_go_round_robin():
    lb = LoadBalancer(3, "least-outstanding")
    picks = [lb.pick({0, 1, 2}) for _ in range(3)]  # nothing started: all tie
    assert sorted(picks) == [0, 1, 2]


def test_invariants():
    with pytest.raises(ValueError):
        LoadBalancer(0)
    with pytest.raises(ValueError):
        LoadBalancer(2, "random")
    with pytest.raises(ValueError):
        LoadBalancer(2).finished(0)  # finishing what never started would go negative
    with pytest.raises(ValueError):
        ReplicaLoad(in_flight=-1)


def test_each_replica_gets_its_own_gpus_when_there_are_enough():
    assert gpu_slices(2, 2, ["0", "1", "2", "3"]) == ["0,1", "2,3"]
    assert gpu_slices(2, 1, ["4", "7", "9"]) == ["4", "7"]
    assert gpu_slices(2, 2, ["0", "1", "2"]) == [None, None]  # too few: they share what the front sees
    assert gpu_slices(3, 1, []) == [None, None, None]  # CPU


def test_each_replica_gets_its_own_cores_when_there_are_enough():
    assert cpu_slices(2, [0, 1]) == [frozenset({0}), frozenset({1})]
    assert cpu_slices(2, [2, 3, 5, 8, 9]) == [frozenset({2, 3}), frozenset({5, 8})]  # the odd core unused
    assert cpu_slices(3, [0, 1]) == [None, None, None]  # too few: they share the front's
    with pytest.raises(ValueError):
        cpu_slices(0, [0])
    assert replica_threads(2, {}, frozenset({4, 5})) == "2"  # its own cores' worth of threads
    assert replica_threads(2, {"OMP_NUM_THREADS": "3"}, frozenset({4, 5})) is None  # the user's says


def test_visible_gpus_follow_cuda_visible_devices_and_none_on_cpu():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 3"}, "auto") == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, "cpu") == []
