"""Each failure of the server lands in its error class, and no failure stalls a level."""

from __future__ import annotations

import time

import pytest
from loadgen_harness import run

from loadgen import LevelSpec, level_workload_factory


@pytest.mark.parametrize(
    "mode,kind",
    [
        ("500", "http_status"),
        ("close", "stream_broken"),  # connection dropped mid-stream
        ("error_chunk", "stream_broken"),  # an error object inside the stream
        ("garbage", "bad_payload"),  # a data line that is not JSON
    ],
)
def test_error_classes(delay_server, mode, kind):
    if mode == "garbage":
        # chosen per request, through the workload's extra body fields
        server = delay_server(ttft_ms=20, itl_ms=5)
        factory = level_workload_factory(extra_body={"x_mode": mode})
    else:
        server = delay_server(ttft_ms=20, itl_ms=5, mode=mode)
        factory = None
    spec = LevelSpec(
        f"err-{mode}",
        concurrency=2,
        input_len=8,
        output_len=8,
        warmup_s=0.2,
        duration_s=0.8,
        request_timeout_s=5.0,
        fail_fast=False,
    )  # a level of errors, measured to its end
    t0 = time.time()
    lr = run(spec, server.target(), factory)
    res = lr.result
    assert res.end_reason == "complete" and not res.server_died and time.time() - t0 < 6.0
    failed = [r for r in lr.records if r.status != "cancelled"]
    assert failed and res.ok == 0
    assert all(r.status == "error" and r.error_kind == kind and r.error for r in failed)
    assert res.errors_by_kind == {kind: len(failed)} and res.in_window > 0
    if mode == "500":
        assert all(r.http_status == 500 and "injected failure" in r.error for r in failed)
        assert all(r.t_first_token is None for r in failed)
    else:
        assert all(r.http_status == 200 and r.t_first_token is not None for r in failed)
    if mode == "close":
        assert all(r.client_token_chunks == 4 for r in failed)  # half of 8, then the drop


@pytest.mark.parametrize("mode", ["hang", "stall"])
def test_hung_server_times_out_within_the_deadline(delay_server, mode):
    server = delay_server(ttft_ms=20, itl_ms=5, mode=mode)
    spec = LevelSpec(
        f"hang-{mode}",
        concurrency=3,
        input_len=8,
        output_len=8,
        warmup_s=0.0,
        duration_s=1.2,
        request_timeout_s=1.0,
        fail_fast=False,
    )
    t0 = time.time()
    lr = run(spec, server.target())
    wall = time.time() - t0
    res = lr.result
    # bounded by warmup + duration + request_timeout + a small grace (plus process start-up)
    assert wall < spec.warmup_s + spec.duration_s + spec.request_timeout_s + 3.0, wall
    assert res.end_reason == "complete"
    inw = lr.in_window
    assert inw and all(r.status == "timeout" and r.error_kind == "timeout" for r in inw)
    assert all(r.e2e_s == pytest.approx(1.0, abs=0.05) for r in inw)
    assert res.timeouts == res.errors_by_kind["timeout"] == sum(r.status == "timeout" for r in lr.records)
    if mode == "stall":
        assert all(r.t_first_token is not None and r.client_token_chunks == 1 for r in inw)
    # the requests sent after the window were cut off when the level stopped, and say so
    assert all(r.status == "cancelled" and not r.in_window for r in lr.records if r.status != "timeout")


def test_dead_server_ends_the_level_early(delay_server):
    server = delay_server(ttft_ms=20, itl_ms=5, die_after=12)
    spec = LevelSpec(
        "dies", concurrency=3, input_len=8, output_len=8, warmup_s=0.2, duration_s=20.0, request_timeout_s=5.0
    )
    t0 = time.time()
    lr = run(spec, server.target())
    wall = time.time() - t0
    res = lr.result
    assert res.server_died and res.end_reason == "server_died"
    assert wall < 6.0, wall  # far less than the 20 s window
    assert server.proc.wait(timeout=5) == 3
    assert 12 <= res.ok <= 12 + spec.concurrency
    assert res.errors_by_kind.get("connect", 0) >= 5
    connect = [r for r in lr.records if r.error_kind == "connect"]
    # refused once it was gone; a request already on a kept-alive connection may see a reset instead
    assert all(
        r.status == "error" and ("Refused" in r.error or "Reset" in r.error or "closed" in r.error) for r in connect
    ), {r.error for r in connect}
    assert sum("Refused" in r.error for r in connect) >= 5
    assert set(res.errors_by_kind) <= {"connect", "stream_broken"}
    assert res.sent == len(lr.records) and res.records_missing == 0
