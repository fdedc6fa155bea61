"""Per-replica statistics of a level (analyzers/stats/replicas.py) from records that name their replica."""

from __future__ import annotations

import numpy as np
import pytest
from synth_run import make_run, rec

from analyzers.stats.replicas import ReplicaShare, level_replicas, run_replicas
from analyzers.summary import analyze_run
from rundir import RequestRecord
from rundir.table import RequestTable


def record(replica, ttft, tokens=10, status="ok", in_window=True, level="c4"):
    t = 1000.0
    rec = RequestRecord(
        level_id=level,
        concurrency=4,
        request_rate=None,
        target_input_len=16,
        target_output_len=tokens,
        t_scheduled=t,
        t_sent=t,
        t_first_token=t + ttft,
        t_done=t + ttft + 0.1,
        status=status,
        in_window=in_window,
        completion_tokens=tokens if status == "ok" else None,
        replica=replica,
    )
    return rec.derive().__dict__


def table(rows):
    return RequestTable.from_dicts(rows)


def test_shares_and_each_replicas_ttft_p99():
    rows = [record("0", 0.1) for _ in range(6)] + [record("1", 0.5, tokens=30) for _ in range(2)]
    rows.append(record("1", 9.0, in_window=False))  # outside the window: not counted
    t = table(rows)
    shares = level_replicas(t, np.arange(len(rows)), "c4")
    assert [s.replica for s in shares] == ["0", "1"]
    zero, one = shares
    assert (zero.requests, one.requests) == (6, 2)
    assert zero.request_share == pytest.approx(0.75) and one.request_share == pytest.approx(0.25)
    assert zero.token_share == pytest.approx(60 / 120) and one.token_share == pytest.approx(60 / 120)
    assert zero.ttft_p99_s == pytest.approx(0.1) and one.ttft_p99_s == pytest.approx(0.5)
    assert not zero.p99_reliable


def test_failed_requests_count_but_have_no_ttft_and_replicas_sort_numerically():
    rows = [record("10", 0.2), record("2", 0.3), record("2", 0.0, status="error")]
    shares = run_replicas(table(rows), ["c4"])
    assert [s.replica for s in shares] == ["2", "10"]
    two = shares[0]
    assert (two.requests, two.ok) == (2, 1) and two.ttft_p99_s == pytest.approx(0.3)


def test_a_single_server_has_no_replica_rows():
    assert run_replicas(table([record(None, 0.1), record(None, 0.2)]), ["c4"]) == []


def test_invariants():
    with pytest.raises(ValueError):
        ReplicaShare("c4", "0", requests=1, ok=2, ttft_p99_s=None, request_share=0.5, token_share=0.5)
    with pytest.raises(ValueError):
        ReplicaShare("c4", "0", requests=1, ok=1, ttft_p99_s=None, request_share=1.5, token_share=0.5)


def _fleet_run(tmp_path, ttfts_by_replica: dict[str, list[float]]):
    records = []
    for replica, ttfts in ttfts_by_replica.items():
        for i, ttft in enumerate(ttfts):
            r = rec(i * 0.1, ttft, ttft + 0.2, 11, level="c4", concurrency=4)
            r.replica = replica
            records.append(r)
    return make_run(tmp_path / "run", records, {"c4": (0, 10)})


def test_a_replica_that_is_the_tail_is_a_finding(tmp_path):
    s, _ = analyze_run(_fleet_run(tmp_path, {"0": [0.1] * 30, "1": [0.1] * 25 + [0.5] * 5}))
    tail = [f for f in s.finding_groups if f.kind == "replica_tail"]
    assert len(tail) == 1 and "replica 1 500 ms, replica 0 100 ms" in tail[0].text and tail[0].levels == ["c4"]
    assert not [f for f in s.finding_groups if f.kind == "replica_imbalance"]
    assert [r["replica"] for r in s.to_dict()["replicas"]] == ["0", "1"]


def test_an_uneven_spread_is_a_finding_and_an_even_fast_fleet_none(tmp_path):
    s, _ = analyze_run(_fleet_run(tmp_path / "a", {"0": [0.1] * 30, "1": [0.1] * 5}))
    assert [f.kind for f in s.finding_groups if f.kind.startswith("replica")] == ["replica_imbalance"]
    s, _ = analyze_run(_fleet_run(tmp_path / "b", {"0": [0.1] * 20, "1": [0.12] * 20}))
    assert not [f for f in s.finding_groups if f.kind.startswith("replica")]
