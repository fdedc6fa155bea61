"""workers=2: a locust master and two worker processes account for requests exactly as one process does."""

from __future__ import annotations

from collections import Counter

import pytest
from loadgen_harness import run

from loadgen import LevelSpec


@pytest.mark.slow
def test_two_workers_record_every_request_once(delay_server):
    server = delay_server(ttft_ms=30, itl_ms=10)
    spec = LevelSpec(
        "c6-w2",
        concurrency=6,
        input_len=16,
        output_len=8,
        warmup_s=0.5,
        duration_s=2.0,
        request_timeout_s=10.0,
        workers=2,
    )
    lr = run(spec, server.target())
    res, recs = lr.result, lr.records
    assert res.end_reason == "complete" and not res.fell_behind, res
    assert len(res.worker_ids) == 2 and set(res.client_cpu_by_worker) == set(res.worker_ids)
    by_worker = Counter(r.worker_id for r in recs)
    assert set(by_worker) == set(res.worker_ids)
    # 3 users each: the two workers carry the same load
    assert abs(by_worker[res.worker_ids[0]] - by_worker[res.worker_ids[1]]) <= 0.2 * len(recs)
    # exactly once: the workers' counters, the records and the server agree, and no record repeats
    assert res.sent == len(recs) and res.records_missing == 0
    assert len({(r.worker_id, r.t_sent) for r in recs}) == len(recs)
    received = server.counts()["received"]
    assert len(recs) - res.cancelled <= received <= len(recs)
    inw = lr.in_window
    assert len(inw) == res.in_window == res.in_window_ok > 0 and all(r.status == "ok" for r in inw)
    for r in recs:
        assert r.in_window == (res.window_start <= r.t_sent < res.window_end)
    expected = spec.concurrency * spec.duration_s / (0.030 + 7 * 0.010)
    assert abs(len(inw) - expected) < 0.2 * expected


@pytest.mark.slow
def test_two_workers_split_an_open_loop_rate(delay_server):
    server = delay_server(ttft_ms=30, itl_ms=10)
    spec = LevelSpec(
        "r30-w2", request_rate=30.0, input_len=16, output_len=8, warmup_s=0.5, duration_s=2.0, workers=2, seed=5
    )
    lr = run(spec, server.target())
    res = lr.result
    assert res.end_reason == "complete" and res.in_window == res.in_window_ok
    # one pacer per worker at rate/2 each: the sum is the asked rate
    expected = spec.request_rate * spec.duration_s
    assert abs(res.in_window - expected) < 4 * expected**0.5, res.in_window
    per_worker = Counter(r.worker_id for r in lr.in_window)
    assert len(per_worker) == 2 and min(per_worker.values()) > expected / 4
    assert res.send_lag_p99_s < 0.020 and not res.fell_behind


def test_workers_take_disjoint_slices_of_the_workload():
    from loadgen.session import LevelSession
    from loadgen.specs import TargetSpec
    from loadgen.workloads import WorkloadOptions, make_workload

    opts = WorkloadOptions(input_len=8, seed=2)
    config = {
        "level": LevelSpec("l", concurrency=2).to_dict(),
        "target": TargetSpec("http://x", "m").to_dict(),
        "workload": opts.to_dict(),
        "n_workers": 2,
    }
    # next_request needs no runner: the sessions are built without one
    w0 = LevelSession({**config, "worker_index": 0}, runner=None)
    w1 = LevelSession({**config, "worker_index": 1}, runner=None)
    got0 = [w0.next_request()[0].prompt for _ in range(3)]
    got1 = [w1.next_request()[0].prompt for _ in range(3)]
    want = make_workload(opts).take(6)
    assert got0 == [s.prompt for s in want[0::2]] and got1 == [s.prompt for s in want[1::2]]
