"""The client's balancing over replicas driven directly (loadgen/replica_balancer.py): the policies
as bookkeeping, the same names as the bundled fleet's front, and least-outstanding against real
servers on loopback."""

from __future__ import annotations

import pytest
from loadgen_harness import run

from loadgen import LevelSpec, TargetSpec
from loadgen.replica_balancer import CLIENT_LB_POLICIES, ReplicaBalancer
from refengine.server.dp_policy import LB_POLICIES


def test_the_client_and_the_front_offer_the_same_policies():
    # One list each side of the import boundary (refengine imports nothing of ours, loadgen not refengine):
    # `llmbench sweep --lb-policy` means the same whether the client or the front balances.
    assert CLIENT_LB_POLICIES == LB_POLICIES


def test_least_outstanding_sends_to_the_replica_with_fewer_in_flight():
    b = ReplicaBalancer(3, "least-outstanding")
    assert [b.pick(), b.pick(), b.pick()] == [0, 1, 2]  # ties: in turn, so an idle fleet spreads
    b.finished(1)
    assert b.pick() == 1  # the only one with nothing in flight
    b.finished(0)
    b.finished(2)
    assert b.pick() == 2  # a tie of 0 and 2: the one after the last pick
    assert b.in_flight == [0, 1, 1]


def test_round_robin_interleaves_the_workers_whatever_is_in_flight():
    w0, w1 = ReplicaBalancer(3, "round-robin", 0, 2), ReplicaBalancer(3, "round-robin", 1, 2)
    picks = [p for _ in range(3) for p in (w0.pick(), w1.pick())]
    assert picks == [0, 1, 2, 0, 1, 2]  # the fleet receives the requests in turn
    assert ReplicaBalancer(2, "least-outstanding", 1, 2).pick() == 1  # each worker's ties start at its own index


def test_a_request_finished_twice_or_an_unknown_policy_is_refused():
    b = ReplicaBalancer(2)
    with pytest.raises(ValueError, match="not counted"):
        b.finished(0)
    with pytest.raises(ValueError, match="least-outstanding"):
        ReplicaBalancer(2, "fastest")
    with pytest.raises(ValueError, match="lb_policy"):
        TargetSpec("http://127.0.0.1:9", "m", replica_urls=["http://127.0.0.1:9"], lb_policy="random")


def test_least_outstanding_keeps_the_load_off_a_slow_replica(delay_server):
    # Replica 0 holds each request 0.8 s before its first token, replica 1 answers at once. Two
    # users: while one waits on the slow replica, every request of the other finds replica 1 with
    # fewer in flight. Round robin would send every other request to the slow one
    # (test_replica_header.py: equal shares).
    slow, fast = delay_server(ttft_ms=1000, itl_ms=2), delay_server(ttft_ms=5, itl_ms=2)
    spec = LevelSpec(
        "c2-lo", concurrency=2, input_len=8, output_len=4, warmup_s=0.1, duration_s=1.5, request_timeout_s=10.0
    )
    lr = run(spec, slow.target(replica_urls=[slow.url, fast.url], lb_policy="least-outstanding"))
    sent = [r for r in lr.records if r.status != "cancelled"]
    assert sent and all(r.status == "ok" for r in sent)
    named = [r.replica for r in sent]
    assert named.count("1") > 3 * named.count("0") > 0
