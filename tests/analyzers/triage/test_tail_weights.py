"""A finding's share of the tail is of the tail's latency above the median, not of its request count
(analyzers/triage/tail_shares.py): a P99 is made by the requests far above the median."""

from __future__ import annotations

from planted import base_records, delay, stalled, write_run

from analyzers.triage.contracts import Finding
from analyzers.triage.levels import level_loads
from analyzers.triage.tail_shares import set_tail_shares
from analyzers.triage.tail_windows import Window, find_tail_windows
from rundir.table import RequestTable


def _share_of_a_stall_among_jitter(tmp_path, stall_s: float) -> float:
    """c=4: the few requests sent in three seconds (a closed loop sends few while stalled: one in four
    kept) wait `stall_s` more; around them every 8th request is 60 ms late (mild jitter above the level's P90).
    The share of the tail a finding naming that second explains."""
    recs = base_records(n=480, concurrency=4, seed=3)
    t0 = recs[0].t_sent
    on, off = t0 + 9.0, t0 + 12.0
    for i, r in enumerate(recs):
        if i % 8 == 0 and not on <= r.t_sent <= off:
            delay(r, 0.06)
    kept = stalled(recs, on, off, stall_s, keep_every=4)
    table = RequestTable.load(write_run(tmp_path / "r", kept, {}))
    tails = find_tail_windows(table, "ttft")
    finding = Finding(
        "p99.host.cpu", "host", "medium", "t", {"planted": True}, [Window(on, off + stall_s + 0.2)], 1, ""
    )
    set_tail_shares(table, "ttft", tails, level_loads(table, None, "ttft"), [finding])
    return finding.tail_share or 0.0


def test_a_few_long_stalls_among_many_small_spikes_are_most_of_the_tail(tmp_path):
    assert _share_of_a_stall_among_jitter(tmp_path, stall_s=2.0) >= 0.5


def test_its_neighbour_stalls_no_larger_than_the_jitter_are_a_small_part_of_it(tmp_path):
    assert _share_of_a_stall_among_jitter(tmp_path, stall_s=0.06) < 0.3
