"""A replica's queue of its own (analyzers/triage/fleet/own_queue.py): the room its KV cache has by its
own gauges, and the fleet-wide findings of its queue yielding to the replica that made it."""

from __future__ import annotations

import numpy as np

from analyzers.probe_series import ProbeSeries
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
