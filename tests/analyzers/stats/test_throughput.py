"""Throughput counts what arrived inside the window (token timestamps), with a block bootstrap over
time slices: exact rates on hand-made streams, multi-token chunks, requests straddling the window's
edges, older records without gaps, and an interval that is tight when steady and wide when bursty."""

import numpy as np
import pytest

from analyzers.stats.slo import Slos
from analyzers.stats.throughput import level_rates, token_arrivals
from analyzers.stats.window import Window
from rundir import RequestRecord
from rundir.table import RequestTable


def stream(t_sent, n_out, ttft=0.1, itl=0.01, chunks=None, n_in=20, in_window=True, status="ok", gaps=True):
    """A request whose `n_out` tokens arrive in `chunks` evenly spaced chunks (default: one per token)."""
    chunks = n_out if chunks is None else chunks
    span = itl * (n_out - 1)
    gap = span / (chunks - 1) if chunks > 1 else 0.0
    r = RequestRecord(
        level_id="c1",
        concurrency=1,
        request_rate=None,
        target_input_len=n_in,
        target_output_len=n_out,
        t_scheduled=t_sent,
        t_sent=t_sent,
        t_first_token=t_sent + ttft,
        t_done=t_sent + ttft + span,
        status=status,
        in_window=in_window,
        prompt_tokens=n_in,
        completion_tokens=n_out,
        client_token_chunks=chunks if gaps else None,
        itl_s=[gap] * (chunks - 1) if gaps else [],
    )
    return r.derive()


def rates(records, window, seed=0):
    table = RequestTable.from_records(records)
    return level_rates(table, np.arange(len(table)), window, Slos(), np.random.default_rng(seed))


def test_tokens_are_timed_by_their_chunks():
    r = stream(100.0, 10, ttft=0.5, itl=0.1)  # tokens at 100.5, 100.6, ..., 101.4
    t, w = token_arrivals(RequestTable.from_records([r]), np.array([0]))
    assert np.allclose(np.sort(t), 100.5 + 0.1 * np.arange(10)) and w.sum() == 10
    multi = stream(100.0, 10, ttft=0.5, itl=0.1, chunks=4)  # 10 tokens in 4 chunks: 2.5 each
    t, w = token_arrivals(RequestTable.from_records([multi]), np.array([0]))
    assert t.size == 4 and np.allclose(w, 2.5) and np.isclose(t.max(), 101.4)
    old = stream(100.0, 10, ttft=0.5, itl=0.1, gaps=False)  # no gaps, no chunk count: spread to the end
    t, w = token_arrivals(RequestTable.from_records([old]), np.array([0]))
    assert np.allclose(np.sort(t), 100.5 + 0.1 * np.arange(10)) and w.sum() == 10


def test_only_what_arrived_inside_the_window_counts():
    # One request streaming 100 tokens over 100.10 .. 101.09 s; the window is [100.505, 101.505).
    r = rates([stream(100.0, 100)], Window(1.0, 100.505, 101.505))
    assert r.values["output tok/s"] == pytest.approx(59.0)  # tokens 41..99 arrived inside
    assert r.values["total tok/s"] == pytest.approx(59.0)  # its prompt counted at 100.1, outside
    assert r.values["requests/s"] == pytest.approx(1.0)  # it finished inside
    # A warm-up request (sent before the window) streams into it and counts for that part.
    r = rates([stream(99.0, 200, in_window=False)], Window(1.0, 100.005, 101.005))
    assert r.values["output tok/s"] == pytest.approx(100.0) and r.values["requests/s"] == 0.0
    # A stream cut off or broken after some tokens: what arrived counts, the request does not.
    cut = rates([stream(100.0, 100, status="cancelled")], Window(1.0, 100.005, 101.005)).values
    assert cut["output tok/s"] == pytest.approx(91.0) and cut["requests/s"] == 0 and cut["goodput req/s"] == 0


def test_steady_level_has_a_tight_interval_and_a_bursty_one_a_wide_one():
    # 4 closed-loop users back to back, 50 tokens at 10 ms after a 100 ms first token, for 20 s.
    steady = [stream(u * 0.037 + k * 0.59, 50, ttft=0.1) for u in range(4) for k in range(34)]
    r = rates(steady, Window(10.0, 5.0, 15.0))
    expected = 4 * 50 / 0.59
    assert r.values["output tok/s"] == pytest.approx(expected, rel=0.01)
    lo, hi = r.ci("output tok/s")
    assert lo <= r.values["output tok/s"] <= hi and (hi - lo) < 0.05 * expected
    # The same tokens bunched in two bursts: the interval says the rate was uneven.
    bursty = [stream(5.0 + (k % 2) * 5.0 + u * 0.001, 50, ttft=0.1) for u in range(4) for k in range(34)]
    lo_b, hi_b = rates(bursty, Window(10.0, 5.0, 15.0)).ci("output tok/s")
    assert hi_b - lo_b > 5 * (hi - lo)


def test_window_without_a_start_begins_at_the_first_in_window_send():
    recs = [stream(100.0 + i, 10) for i in range(5)]
    r = rates(recs, Window(5.0))
    assert r.values["output tok/s"] == pytest.approx(50 / 5) and r.values["requests/s"] == pytest.approx(1.0)
