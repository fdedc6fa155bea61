"""A replica's queue of its own (analyzers/triage/fleet/own_queue.py): the room its KV cache has by its
own gauges, and the fleet-wide findings of its queue yielding to the replica that made it."""

from __future__ import annotations

import numpy as np

from analyzers.probe_series import ProbeSeries
from analyzers.triage.contracts import Finding
from analyzers.triage.fleet.own_queue import OWN_QUEUE_KEY, own_queue_yields
from analyzers.triage.fleet.per_engine import less_room, replica_gauges
from analyzers.triage.tail_windows import Window


def _gauges(running: dict[str, list[float]], kv: dict[str, list[float]], waiting: dict[str, list[float]]):
    n = len(next(iter(running.values())))
    numeric = {}
    for r in running:
        numeric[f"per_engine.{r}.running"] = np.array(running[r], float)
        numeric[f"per_engine.{r}.kv_usage"] = np.array(kv[r], float)
        numeric[f"per_engine.{r}.waiting"] = np.array(waiting[r], float)
    series = ProbeSeries("server", np.arange(n, dtype=float), numeric)
    return replica_gauges(series, list(running), Window(0.0, float(n)))


def test_a_cache_that_holds_three_requests_has_less_room_than_one_that_holds_thousands():
    # Replica 1 is a 12-block cache of 4-block requests (a request 2 blocks at its prompt, 4 at its
    # end); a preempted request still streams to its client, so the records saw it generate 5 at once.
    # Its gauges: 3 running at 0.83-1.0 full. Replica 0: 5 running at 0.0003 of its cache.
    g = _gauges(
        {"0": [5, 4, 3, 5], "1": [3, 3, 2, 3]},
        {"0": [3e-4, 2e-4, 1e-4, 3e-4], "1": [0.92, 1.0, 0.58, 0.83]},
        {"0": [0, 0, 0, 0], "1": [2, 1, 1, 0]},
    )
    assert 3.0 <= g["1"].room_requests <= 3.6 and g["0"].room_requests > 10_000
    assert g["1"].evidence()["kv_room_requests"] == round(g["1"].room_requests, 3)
    assert less_room(g, "1") and not less_room(g, "0")


def test_equal_caches_one_holding_a_user_more_do_not_read_as_less_room():
    # Two 12-block caches: replica 1 was handed a fourth user and queues; replica 0 ran three at most.
    g = _gauges(
        {"0": [3, 2, 3, 1], "1": [3, 3, 3, 3]},
        {"0": [0.83, 0.5, 1.0, 0.33], "1": [1.0, 0.92, 0.83, 1.0]},
        {"0": [0, 0, 0, 0], "1": [1, 1, 0, 1]},
    )
    assert not less_room(g, "1")


def test_without_a_running_gauge_the_room_is_not_known_and_nothing_is_said():
    series = ProbeSeries(
        "server",
        np.arange(3, dtype=float),
        {f"per_engine.{r}.{k}": np.ones(3) for r in "01" for k in ("kv_usage", "waiting")},
    )
    g = replica_gauges(series, ["0", "1"], Window(0.0, 3.0))
    assert g["1"].room_requests is None and not less_room(g, "1")


def _finding(check_id: str, category: str, share: float, **evidence) -> Finding:
    return Finding(check_id, category, "high", check_id, evidence, [], 0, "", tail_share=share)


def test_the_fleets_findings_of_a_replicas_own_queue_become_context_beside_it():
    hot = _finding("p99.fleet.hot-replica", "fleet", 0.86, replica="1", **{OWN_QUEUE_KEY: True})
    preempt = _finding("p99.sched.preemption", "scheduling", 0.96, preemptions=20)
    kv = _finding("p99.sched.kv-capacity", "scheduling", 1.0, kv_usage_peak=1.0)
    neighbour = _finding("p99.host.cpu", "host", 0.4, cpu_cores=1.0)
    own_queue_yields([hot, preempt, kv, neighbour])
    assert preempt.tail_share == kv.tail_share == 0.0
    assert preempt.evidence["queue_was_replica"] == kv.evidence["queue_was_replica"] == "1"
    assert preempt.title.endswith("(replica 1's own queue, its KV cache the smaller: p99.fleet.hot-replica)")
    assert hot.tail_share == 0.86 and neighbour.tail_share == 0.4


def test_a_hot_replica_slower_for_another_reason_leaves_the_fleets_queue_findings_standing():
    # A slower build, or a replica whose cache is as roomy as the others': the queue may be the fleet's.
    hot = _finding("p99.fleet.hot-replica", "fleet", 0.9, replica="1", **{OWN_QUEUE_KEY: False})
    preempt = _finding("p99.sched.preemption", "scheduling", 0.96, preemptions=20)
    own_queue_yields([hot, preempt])
    assert preempt.tail_share == 0.96 and "queue_was_replica" not in preempt.evidence
