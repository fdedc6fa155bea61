"""Throughput on a server whose timing is known exactly (tests/loadgen/delay_server.py): steady
closed-loop streams give the configured token rate within 3% and a 95% interval inside ±5% of it,
where the old count (output tokens of the requests *sent* in the window) is quantized to whole
requests."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "loadgen"))

from loadgen_harness import run, start_delay_server

from analyzers.stats.summarize import summarize_level
from analyzers.stats.window import Window
from loadgen import LevelSpec

TTFT_MS, ITL_MS, OUT = 20.0, 40.0, 50  # 25 tok/s per stream, a 2 s cycle


@pytest.fixture
def server():
    s = start_delay_server(ttft_ms=TTFT_MS, itl_ms=ITL_MS)
    yield s
    s.proc.kill()
    s.proc.wait()


@pytest.mark.slow  # ~10 s each; .ci/run runs it by name (the default suite keeps under 10 minutes)
@pytest.mark.parametrize("concurrency", [4, 8])
def test_steady_streams_give_the_configured_rate_with_a_tight_interval(server, concurrency):
    spec = LevelSpec(
        f"c{concurrency}",
        concurrency=concurrency,
        input_len=16,
        output_len=OUT,
        warmup_s=1.0,
        duration_s=6.0,
        request_timeout_s=20.0,
    )
    lr = run(spec, server.target())
    res = lr.result
    assert res.end_reason == "complete" and not res.fell_behind, res
    window = Window(res.window_end - res.window_start, res.window_start, res.window_end)
    lv = summarize_level(lr.records, spec.level_id, window)
    # Each user streams OUT tokens per cycle of TTFT + (OUT - 1) ITL (plus the client's turnaround).
    cycle_s = (TTFT_MS + (OUT - 1) * ITL_MS) / 1000
    configured = concurrency * OUT / cycle_s
    old = sum(r.completion_tokens for r in lr.in_window if r.status == "ok") / window.seconds
    lo, hi = lv.output_tok_s_ci
    print(
        f"c={concurrency}: configured {configured:.1f} tok/s; arrived {lv.output_tok_s:.1f} "
        f"({lv.output_tok_s / configured - 1:+.2%}), 95% CI {lo:.1f}–{hi:.1f} "
        f"({lo / configured - 1:+.2%} / {hi / configured - 1:+.2%}); sent-in-window count {old:.1f} "
        f"({old / configured - 1:+.2%}); req/s {lv.req_s:.2f} vs {concurrency / cycle_s:.2f}"
    )
    assert lv.output_tok_s == pytest.approx(configured, rel=0.03)
    assert configured * 0.95 <= lo <= lv.output_tok_s <= hi <= configured * 1.05
    assert lv.total_tok_s > lv.output_tok_s and lv.total_tok_s_ci is not None
    assert lv.req_s == pytest.approx(concurrency / cycle_s, rel=0.3)
    # Every chunk of every request that streamed into the window counted, warm-up requests included.
    assert any(not r.in_window and r.t_done > res.window_start for r in lr.records)
    assert np.isfinite(lv.goodput_req_s) and lv.goodput_req_s <= lv.req_s + 1e-9
