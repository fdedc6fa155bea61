"""Over-saturation: an open-loop level whose queue keeps growing is stopped early and marked over
capacity (never within the SLO); a steady level is not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from loadgen.saturation import SaturationRule
from rundir import RequestRecord, RunDir


def _rec(t_sent: float, ttft: float) -> RequestRecord:
    r = RequestRecord(
        level_id="r",
        concurrency=None,
        request_rate=1.0,
        target_input_len=1,
        target_output_len=1,
        t_scheduled=t_sent,
        t_sent=t_sent,
        t_first_token=t_sent + ttft,
        t_done=t_sent + ttft + 0.1,
        status="ok",
        in_window=True,
    )
    return r.derive()


def _feed(ttfts, span_s=6.0):
    rule = SaturationRule(ttft_bound_s=0.5)
    verdict = None
    for t, y in zip(np.linspace(0, span_s, len(ttfts)), ttfts):
        rule.add(_rec(1000.0 + t, float(y)))
        verdict = verdict or rule.reason()
    return verdict


def test_rule_fires_on_a_rising_ttft_and_not_on_a_steady_or_slow_one():
    rng = np.random.default_rng(0)
    rising = np.linspace(0.05, 3.0, 120) + rng.normal(0, 0.05, 120)
    assert "TTFT rose" in (_feed(rising) or "")
    assert _feed(0.3 + rng.normal(0, 0.05, 120)) is None  # steady: a long queue is not a growing one
    assert _feed(np.linspace(0.05, 0.4, 120)) is None  # rising but within the bound


@pytest.mark.slow  # ~10 s, a second guard of a path another default test covers; .ci/run runs it
def test_runaway_level_is_stopped_early_and_marked_over_capacity(slot_server, tmp_path):
    server = slot_server(slots=2, prefill_ms=20, itl_ms=25)  # ~0.4 s a request: capacity ~5 req/s
    out = tmp_path / "run"
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmbench.cli",
            "sweep",
            "--target",
            server.url,
            "--request-rate",
            "20",
            "--input-len",
            "16",
            "--output-len",
            "16",
            "--warmup",
            "1s",
            "--duration",
            "30s",
            "--slo-ttft",
            "0.5",
            "--probes",
            "none",
            "--request-timeout",
            "60s",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert took < 25, f"the runaway level ran {took:.0f} s"
    run = RunDir(out)
    (lv,) = run.read_summary()["levels"]
    assert lv["slo_met"] is False
    assert any(n.startswith("over capacity: stopped early") for n in lv["notes"]), lv["notes"]
    assert run.read_info().level_meta[lv["level_id"]].over_capacity
    print(f"runaway level stopped after {took:.1f} s (of 31 s): {lv['notes']}")


def test_requests_waiting_for_a_first_token_witness_a_runaway_before_any_finishes():
    def rule_with(in_flight, late):
        rule = SaturationRule(ttft_bound_s=0.5)
        for k, n in enumerate(in_flight):
            rule.add_in_flight(1000.0 + 0.5 * k, n, late)
        return rule.reason()

    growing = [1, 2, 4, 6, 8, 10, 12, 14, 16]
    assert "no first token" in (rule_with(growing, late=3) or "")
    assert rule_with(growing, late=2) is None  # too few late requests
    assert rule_with([8] * 9, late=5) is None  # late, but the queue is not growing


@pytest.mark.slow  # ~30 s; .ci/run runs it (--runslow)
def test_a_level_whose_requests_get_no_first_token_is_stopped_before_any_finishes(slot_server, tmp_path):
    # One slot held 6.3 s a request (50 ms to the first token, 32 tokens 200 ms apart): at 5 req/s
    # the first request finishes only 6 s into the level, and the queue behind it never gets a token.
    server = slot_server(slots=1, prefill_ms=50, itl_ms=200)
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmbench.cli",
            "sweep",
            "--target",
            server.url,
            "--request-rate",
            "5",
            "--input-len",
            "16",
            "--output-len",
            "32",
            "--warmup",
            "1s",
            "--duration",
            "30s",
            "--slo-ttft",
            "0.5",
            "--probes",
            "none",
            "--request-timeout",
            "60s",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = RunDir(out)
    (lv,) = run.read_summary()["levels"]
    meta = run.read_info().level_meta[lv["level_id"]]
    assert lv["slo_met"] is False and "no first token" in meta.over_capacity, meta
    assert meta.window_s < 6, meta  # stopped before the first request could finish
    # The arrivals are over the part of the window that ran, not the 30 s planned.
    arrivals = next(n for n in meta.notes if n.startswith("arrivals:"))
    offered = float(arrivals.split("offered ")[1].split()[0])
    assert 2 <= offered <= 10, arrivals  # 5 req/s (Poisson over ~2 s); over 30 s it read 0.37


def test_late_requests_count_only_once_some_first_token_came_within_the_bound():
    """A slow prefill (every TTFT past twice the bound from the first request) misses the SLO but
    does not run away: its requests never count as late, so the level is measured to its end."""
    from loadgen.session import LevelSession
    from loadgen.specs import LevelSpec
    from loadgen.sse import StreamResult

    s = LevelSession.__new__(LevelSession)  # only the bookkeeping late_first_tokens reads
    s.level = LevelSpec(level_id="r", request_rate=5.0, saturation_ttft_s=0.5)
    s._open, s._fast_first_token = {}, False
    waiting = [StreamResult() for _ in range(4)]
    for k, stream in enumerate(waiting):
        s._open[k] = (100.0 + 0.1 * k, stream)
    assert s.late_first_tokens(now=105.0) == 0  # no first token within the bound yet: not late
    fast = StreamResult()
    fast.t_first_token = 99.2
    s._open[9] = (99.0, fast)  # one came in 0.2 s: TTFT has risen since
    assert s.late_first_tokens(now=105.0) == 4
