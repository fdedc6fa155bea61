"""A queue explains no more of the tail than the seconds the server says it held requests: a waiting
gauge that reads requests in the spikes while the server's queue-time histogram says each waited
3 ms, in the spikes as in the calm, is not the cause of a tail 1 s above the median; the same gauge
with the queue time to match keeps the tail."""

from __future__ import annotations

from planted import base_records, clean_probes, delay_in_episodes, rows_in, write_run

from analyzers.triage.p99 import diagnose_p99
from analyzers.triage.server import QUEUE_ID

PER_SECOND = 11  # requests a second: 8 users, ~0.72 s each


def _delayed():
    recs = base_records()
    windows = delay_in_episodes(recs)
    return recs, windows, clean_probes(recs[0].t_sent - 1, max(r.t_done for r in recs) + 1)


def _run(tmp_path, queued_in_episodes_s: float):
    recs, windows, probes = _delayed()
    for row in probes["server"]:
        row |= dict(queue_time_count=PER_SECOND, queue_time_mean_s=0.003)  # a short wait for the current step
    for row in rows_in(probes["server"], windows):
        row |= dict(waiting=3, queue_time_mean_s=queued_in_episodes_s)
    return diagnose_p99(write_run(tmp_path / "r", recs, probes))


def _queue(diag):
    return next(f for f in diag.findings + diag.context if f.check_id == QUEUE_ID)


def test_a_gauge_the_servers_queue_time_does_not_bear_out_is_not_the_cause(tmp_path):
    diag = _run(tmp_path, queued_in_episodes_s=0.003)
    queue = _queue(diag)
    assert queue not in diag.findings, [f.title for f in diag.findings]
    assert queue.evidence["queue_seconds_above_typical_s"] == 0.0
    assert queue.evidence["tail_seconds_above_median_s"] > 30  # three episodes of requests 1 s late
    assert "explains at most 0% of it" in queue.title, queue.title


def test_a_queue_whose_seconds_match_the_tail_keeps_it(tmp_path):
    diag = _run(tmp_path, queued_in_episodes_s=1.0)
    queue = diag.findings[0]
    assert queue.check_id == QUEUE_ID and queue.tail_share > 0.9, [(f.title, f.tail_share) for f in diag.findings]
    assert "at most" not in queue.title and "queue_seconds_above_typical_s" not in queue.evidence


def test_a_server_that_exports_no_queue_time_count_is_left_as_it_was(tmp_path):
    recs, windows, probes = _delayed()
    for row in rows_in(probes["server"], windows):
        row |= dict(waiting=3)  # no queue-time histogram: nothing to bound the gauge with
    queue = diagnose_p99(write_run(tmp_path / "r", recs, probes)).findings[0]
    assert queue.check_id == QUEUE_ID and queue.tail_share > 0.9 and "at most" not in queue.title
