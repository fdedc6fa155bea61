"""The fail-fast rule on records, without a server."""

from __future__ import annotations

from loadgen.fail_fast import CONSECUTIVE_N, FIRST_N, FailFast
from rundir import RequestRecord


def rec(status: str, error: str | None = None) -> RequestRecord:
    return RequestRecord(
        level_id="l",
        concurrency=1,
        request_rate=None,
        target_input_len=1,
        target_output_len=1,
        t_scheduled=0.0,
        t_sent=0.0,
        t_first_token=None,
        t_done=None,
        status=status,
        in_window=True,
        error=error,
        http_status=400 if error else None,
    )


def test_the_first_requests_all_failing_trips_it_with_the_servers_message():
    ff = FailFast(t_start=0.0)
    for _ in range(FIRST_N - 1):
        ff.add(rec("error", "quota exhausted"))
    assert ff.reason(now=1.0) is None
    ff.add(rec("cancelled"))  # a cut-off request says nothing about the server
    assert ff.reason(now=1.0) is None
    ff.add(rec("error", "quota exhausted"))
    assert "HTTP 400: quota exhausted" in ff.reason(now=1.0)


def test_everything_failing_in_the_first_seconds_trips_it_early():
    ff = FailFast(t_start=0.0)
    for _ in range(3):
        ff.add(rec("error", "bad"))
    assert ff.reason(now=1.0) is None and ff.reason(now=6.0) is not None


def test_successes_keep_it_quiet_until_a_long_run_of_failures():
    ff = FailFast(t_start=0.0)
    ff.add(rec("ok"))
    for _ in range(CONSECUTIVE_N - 1):
        ff.add(rec("error", "down"))
    assert ff.reason(now=100.0) is None
    ff.add(rec("ok"))
    for _ in range(CONSECUTIVE_N - 1):
        ff.add(rec("error", "down"))
    assert ff.reason(now=100.0) is None
    ff.add(rec("error", "down"))
    assert "last 50 requests all failed" in ff.reason(now=100.0)
