"""A replica starved of its own cores (analyzers/triage/fleet/own_cores.py): a neighbour on one replica's
cores slows some of its requests, not its median one; the host probe's per-replica run-queue wait says
whose cores it took, and the host's neighbour finding yields to the replica it starved."""

from __future__ import annotations

import numpy as np
from fleet_runs import Replica, fleet_run

from analyzers.probe_series import ProbeSeries
from analyzers.triage.fleet.own_cores import OWN_CORES_KEY, replica_cpu_wait, starved_alone
from analyzers.triage.p99 import diagnose_p99
from analyzers.triage.tail_windows import Window


def test_a_replica_a_neighbour_stalls_now_and_then_is_named_by_its_own_wait(tmp_path):
    """One request in seven on replica 1 lives through a neighbour's burst (4x its TTFT): 98% of the
    tail is replica 1's, its median 1.1x the other's. The host probe's per-replica wait (replica 1
    waited 60% of its runnable time, replica 0 10%) says why: its own cores."""
    replicas = [Replica(), Replica(stall_share=0.15)]
    diag = diagnose_p99(
        fleet_run(tmp_path / "r", replicas, n=400, seed=3, concurrency=6, cpu_wait={"0": 0.1, "1": 0.6})
    )
    assert diag.findings and diag.findings[0].check_id == "p99.fleet.hot-replica", diag.headline
    f = diag.findings[0]
    assert f.evidence["replica"] == "1" and f.evidence[OWN_CORES_KEY] is True, f.evidence
    assert f.evidence["slowness_from"] == "own cores" and f.evidence["latency_vs_others_same_load"] < 1.5
    assert f.evidence["replica_cpu_wait_share"] == {"0": 0.1, "1": 0.6}
    assert "replica 1's server threads waited for a CPU in 60% of their runnable time, replica 0's in 10%" in f.title
    assert f.next_step.startswith("move the other processes off replica 1's cores"), f.next_step


def test_two_replicas_waiting_alike_are_not_starved_alone(tmp_path):
    """Both replicas waited (the host is busy, not one replica's cores): not its own cores; the tail's
    episodes still say it is replica 1's (tail_episodes.py), without saying why."""
    run = fleet_run(
        tmp_path / "r",
        [Replica(), Replica(stall_share=0.15)],
        n=400,
        seed=3,
        concurrency=6,
        cpu_wait={"0": 0.4, "1": 0.6},
    )
    hot = next(f for f in diagnose_p99(run).findings if f.check_id == "p99.fleet.hot-replica")
    assert hot.evidence[OWN_CORES_KEY] is False and hot.evidence["slowness_from"] == "its tail", hot.evidence


def test_starved_alone_needs_its_own_wait_high_and_every_other_replicas_low():
    assert starved_alone({"0": 0.1, "1": 0.6}, "1")
    assert not starved_alone({"0": 0.1, "1": 0.6}, "0")
    assert not starved_alone({"0": 0.35, "1": 0.6}, "1")  # the other waited more than half as much
    assert not starved_alone({"0": 0.05, "1": 0.3}, "1")  # not starved: 30% of its runnable time
    assert not starved_alone({"1": 0.9}, "1")  # no other replica read: nothing to set it against


def test_the_wait_is_read_over_the_span_and_a_replica_the_probe_never_read_is_left_out():
    t = np.arange(10, dtype=float)
    numeric = {
        "per_replica.0.cpu_wait_share": np.array([0.9] * 5 + [0.1] * 5),
        "per_replica.1.cpu_wait_share": np.full(10, np.nan),
    }
    waits = replica_cpu_wait(ProbeSeries("host", t, numeric), ["0", "1", "2"], Window(5.0, 8.0))
    assert waits == {"0": 0.1}, waits
    assert replica_cpu_wait(None, ["0"], Window(0.0, 1.0)) == {}
