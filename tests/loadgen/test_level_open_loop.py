"""Open loop: arrivals follow the plan (rate x duration in the window), independent of how long
requests take, and the client keeps up (small send lag)."""

from __future__ import annotations

import itertools
import math

from loadgen_harness import run

from loadgen import LevelSpec
from loadgen.arrivals import ArrivalPlan


def test_poisson_arrivals_at_a_fixed_rate(delay_server):
    # Requests take ~0.5 s and arrive at 40/s: ~20 in flight at once, so a closed loop could not
    # produce this rate with the few users it would have had.
    server = delay_server(ttft_ms=100, itl_ms=25, mode="ok")
    spec = LevelSpec(
        "rate40",
        request_rate=40.0,
        input_len=16,
        output_len=16,
        warmup_s=0.5,
        duration_s=3.0,
        request_timeout_s=10.0,
        seed=11,
    )
    lr = run(spec, server.target())
    res = lr.result
    assert res.end_reason == "complete" and res.in_window == res.in_window_ok
    n = res.in_window
    expected = spec.request_rate * spec.duration_s
    assert abs(n - expected) < 4 * math.sqrt(expected), (n, expected)  # Poisson tolerance
    # The plan is deterministic by seed: the window holds exactly the planned arrivals that fall
    # in it (give or take one at each edge, where send lag may move a request across).
    planned = list(
        itertools.takewhile(
            lambda t: t < spec.warmup_s + spec.duration_s,
            ArrivalPlan(spec.request_rate, seed=spec.seed, stream=0).times(0.0),
        )
    )
    exact = sum(1 for t in planned if t >= spec.warmup_s)
    assert abs(n - exact) <= 2, (n, exact)
    # t_scheduled is the planned time and the client sent on time
    print(
        f"open loop: {n} in window (planned {exact}, rate x duration {expected:.0f}); send lag P50 "
        f"{1000 * res.send_lag_p50_s:.2f} ms, P99 {1000 * res.send_lag_p99_s:.2f} ms; client CPU {res.client_cpu_percent:.0f}%"
    )
    assert res.send_lag_p99_s < 0.020, res.send_lag_p99_s
    assert not res.fell_behind and res.client_cpu_percent < 90
    inw = sorted(lr.in_window, key=lambda r: r.t_scheduled)
    assert max(r.send_lag_s for r in inw) < 0.05
    # arrivals did not wait for completions: many requests overlapped
    overlap = max(sum(1 for o in inw if o.t_sent <= r.t_sent < o.t_done) for r in inw)
    assert overlap >= 10
    assert all(r.concurrency is None and r.request_rate == 40.0 for r in lr.records)
