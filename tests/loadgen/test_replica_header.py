"""Each record names the replica that served it, from the response header the target names."""

from __future__ import annotations

from loadgen_harness import run

from loadgen import LevelSpec

SPEC = LevelSpec(
    "c2-replica", concurrency=2, input_len=8, output_len=4, warmup_s=0.1, duration_s=0.5, request_timeout_s=5.0
)


def test_the_named_response_header_is_recorded(delay_server):
    # Any response header can name the replica: uvicorn's own `server` header stands in for a
    # router's here (the fleet's x-llmbench-replica is read end to end in tests/llmbench/sweep/test_sweep_fleet.py).
    lr = run(SPEC, delay_server(ttft_ms=5, itl_ms=2).target(replica_header="Server"))
    answered = [r for r in lr.records if r.http_status is not None]
    assert answered and all(r.replica == "uvicorn" for r in answered)


def test_a_header_the_response_lacks_or_none_asked_for_leaves_replica_null(delay_server):
    server = delay_server(ttft_ms=5, itl_ms=2)
    for header in ("x-llmbench-replica", None):
        lr = run(SPEC, server.target(replica_header=header))
        assert lr.records and all(r.replica is None for r in lr.records)


def test_replicas_driven_directly_take_turns_and_are_named_by_index(delay_server):
    a, b = delay_server(ttft_ms=5, itl_ms=2), delay_server(ttft_ms=5, itl_ms=2)
    target = a.target(replica_urls=[a.url, b.url + "/v1"], replica_header="Server")
    lr = run(SPEC, target)
    sent = [r for r in lr.records if r.status != "cancelled"]
    assert sent and all(r.status == "ok" for r in sent)
    named = [r.replica for r in sent]
    # The client's pick, not the header: the index in replica_urls, as the server probe's per_engine keys.
    assert set(named) == {"0", "1"}
    assert abs(named.count("0") - named.count("1")) <= 2  # in turn (two users interleave)
    assert a.counts()["received"] > 0 and b.counts()["received"] > 0
