"""Counting records into a LevelResult, and the fell-behind rule."""

from __future__ import annotations

import pytest

from loadgen import LevelSpec
from loadgen.tally import LevelTally, fell_behind_reasons
from rundir import RequestRecord


def rec(status="ok", kind=None, in_window=True, lag=0.0, worker="w0"):
    return RequestRecord(
        level_id="l",
        concurrency=None,
        request_rate=5.0,
        target_input_len=1,
        target_output_len=1,
        t_scheduled=100.0,
        t_sent=100.0 + lag,
        t_first_token=None,
        t_done=101.0,
        status=status,
        in_window=in_window,
        error_kind=kind,
        worker_id=worker,
    ).derive()


def test_counts_by_status_and_kind():
    t = LevelTally(LevelSpec("l", request_rate=5.0))
    for r in [
        rec(),
        rec(in_window=False),
        rec("error", "http_status"),
        rec("timeout", "timeout"),
        rec("cancelled", in_window=False),
        rec("error", "connect", worker="w1"),
    ]:
        t.add(r)
    res = t.result({"w0": {"cpu_percent": 12.0}}, sent_reported=7)
    assert (res.sent, res.in_window, res.in_window_ok, res.ok) == (6, 4, 1, 2)
    assert res.errors_by_kind == {"http_status": 1, "timeout": 1, "connect": 1} and res.errors == 3
    assert res.timeouts == 1 and res.cancelled == 1
    assert res.worker_ids == ["w0", "w1"] and res.records_missing == 1
    assert res.client_cpu_percent == 12.0 and not res.fell_behind


def test_send_lag_percentiles_over_the_window():
    t = LevelTally(LevelSpec("l", request_rate=5.0))
    for i in range(100):
        t.add(rec(lag=0.001 * i))
    t.add(rec(lag=5.0, in_window=False))  # out of window: not in the percentiles
    res = t.result({}, None)
    assert res.send_lag_p50_s == pytest.approx(0.0495) and res.send_lag_p99_s == pytest.approx(0.09801)
    assert res.fell_behind and "send lag" in res.fell_behind_reasons[0]


def test_fell_behind_rule():
    open_loop, closed = LevelSpec("o", request_rate=1.0), LevelSpec("c", concurrency=1)
    assert fell_behind_reasons(open_loop, 0.049, {"w0": 89.0}) == []
    assert len(fell_behind_reasons(open_loop, 0.051, {"w0": 50.0})) == 1
    assert fell_behind_reasons(closed, 0.5, {"w0": 50.0}) == []  # closed loop has no plan to lag
    assert "w1" in fell_behind_reasons(closed, None, {"w0": 10.0, "w1": 95.0})[0]
