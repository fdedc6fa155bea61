"""The request-only P99 checks on planted run directories, and the tail windows under them."""

from __future__ import annotations

import numpy as np
from planted import base_records, delay, plant_head_of_line, write_run

from analyzers.triage.client_lag import check_send_lag
from analyzers.triage.requests import check_hol_blocking, holds_a_point
from analyzers.triage.tail_windows import Window, complement, find_tail_windows, merge
from rundir.table import RequestTable


def test_merge_and_complement():
    ws = merge([Window(5, 6), Window(1, 2), Window(2.1, 3)])
    assert ws == [Window(1, 3), Window(5, 6)]
    assert complement(Window(0, 10), ws) == [Window(0, 1), Window(3, 5), Window(6, 10)]


def test_holds_a_point_matches_brute_force():
    rng = np.random.default_rng(1)
    s, pts = rng.random(200) * 100, rng.random(30) * 100
    e = s + rng.random(200) * 3
    brute = np.array([np.any((pts >= s[i]) & (pts <= e[i])) for i in range(200)])
    assert (holds_a_point(s, e, pts) == brute).all()


def test_steady_run_has_no_spikes(tmp_path):
    table = RequestTable.load(write_run(tmp_path / "r", base_records()))
    tails = find_tail_windows(table)
    assert tails.spikes == [] and tails.levels[0].n == 600 and tails.calm_s > 0
    assert check_hol_blocking(table, tails).status == "passed"
    assert check_send_lag(table, tails).status == "passed"


def test_planted_spikes_are_found_and_merged(tmp_path):
    recs = base_records()
    for r in recs[100:104]:  # four requests of one episode
        delay(r, 1.0)
    table = RequestTable.load(write_run(tmp_path / "r", recs))
    tails = find_tail_windows(table)
    assert sorted(tails.spike_rows.tolist()) == [100, 101, 102, 103]
    assert len(tails.spikes) == 1
    assert tails.spikes[0].start == recs[100].t_sent


def test_head_of_line_blocking_is_named(tmp_path):
    recs = base_records(long_every=10)
    plant_head_of_line(recs)
    table = RequestTable.load(write_run(tmp_path / "r", recs))
    res = check_hol_blocking(table, find_tail_windows(table))
    assert res.status == "failed", res.detail
    f = res.finding
    assert f.check_id == "p99.sched.long-prefill" and f.evidence["long_prompts"] == 60
    assert f.evidence["short_spikes_released_by_long_prefill"] >= 0.8 and f.coverage > 0.8


def test_long_prompts_alone_are_not_blamed(tmp_path):
    # Long prompts exist and overlap short ones, but the short tail is random: no HOL pattern.
    recs = base_records(long_every=10)
    rng = np.random.default_rng(3)
    for i in rng.choice([i for i, r in enumerate(recs) if r.prompt_tokens != 4096], 12, replace=False):
        delay(recs[i], 0.6)
    table = RequestTable.load(write_run(tmp_path / "r", recs))
    assert check_hol_blocking(table, find_tail_windows(table)).status == "passed"


def test_late_client_is_flagged(tmp_path):
    recs = base_records()
    for r in recs[200:220]:
        r.t_scheduled = r.t_sent - 0.3  # the client sent these 300 ms after their planned time
        r.derive()
        delay(r, 0.5)
    table = RequestTable.load(write_run(tmp_path / "r", recs))
    res = check_send_lag(table, find_tail_windows(table))
    assert res.status == "failed" and res.finding.evidence["spikes_sent_late"] == 20
