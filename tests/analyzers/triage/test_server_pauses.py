"""`p99.host.pause`: a silence of the whole server (no token to any stream, then each at its pace) is
named as the tail's cause; the same silence read back in a burst (the client's), ended by a long
prompt's first token (head-of-line blocking's) or in a clean run is not a pause."""

from __future__ import annotations

from planted import BASE_TTFT_S, base_records, clean_probes, pause_server, write_run

from analyzers.triage.host.pauses import PAUSE_ID, find_pauses
from analyzers.triage.p99 import diagnose_p99
from rundir.table import RequestTable

PAUSE_S = 0.4
AT = (8.0, 20.0, 33.0, 47.0)  # seconds after the first request


def _paused(tmp_path, recs, at=AT, seconds=PAUSE_S):
    t0 = recs[0].t_sent
    for a in at:
        pause_server(recs, t0 + a, seconds)
    probes = clean_probes(t0 - 1, max(r.t_done for r in recs) + 1)
    return write_run(tmp_path / "r", recs, probes)


def test_a_clean_run_has_no_pause(tmp_path):
    recs = base_records()
    run = write_run(tmp_path / "r", recs, clean_probes(recs[0].t_sent - 1, max(r.t_done for r in recs) + 1))
    assert find_pauses(RequestTable.load(run)) == []
    check = next(c for c in diagnose_p99(run).checks if c.check_id == PAUSE_ID)
    assert check.status == "passed" and "no silence" in check.detail


def test_pauses_of_the_whole_server_are_named_first_with_what_each_held(tmp_path):
    run = _paused(tmp_path, base_records())
    pauses = find_pauses(RequestTable.load(run))
    assert len(pauses) == len(AT), pauses
    assert all(abs(p.seconds - PAUSE_S) < 0.05 and p.decoding >= 1 for p in pauses)
    assert sum(p.waiting for p in pauses) >= 3  # requests waiting for a first token through them
    diag = diagnose_p99(run)
    first = diag.findings[0]
    assert first.check_id == PAUSE_ID and first.kind == "differential", [f.title for f in diag.findings]
    assert f"{len(AT)} pauses of" in first.title and "not a prefill, not the client" in first.title
    assert first.evidence["pauses"] == len(AT) and len(first.evidence["longest_pauses"]) == len(AT)
    assert first.evidence["percentile_without_s"] < first.evidence["percentile_with_s"]


def test_a_silence_read_back_in_a_burst_is_the_clients_not_a_pause(tmp_path):
    recs = base_records()
    t0 = recs[0].t_sent
    for a in AT:
        pause_server(recs, t0 + a, PAUSE_S)
    # The client stalled instead: the tokens waited in its socket and it read them back to back.
    for r in recs:
        t = r.t_first_token
        for k, gap in enumerate(r.itl_s):
            t += gap
            if gap >= PAUSE_S:
                after = r.itl_s[k + 1 : k + 4]
                r.itl_s[k + 1 : k + 4] = [1e-5] * len(after)
                r.t_done -= sum(after) - 1e-5 * len(after)
                r.derive()
                break
    run = write_run(tmp_path / "r", recs, clean_probes(t0 - 1, max(r.t_done for r in recs) + 1))
    assert find_pauses(RequestTable.load(run)) == []


def test_a_silence_ended_by_a_long_prompts_first_token_is_head_of_line_not_a_pause(tmp_path):
    # Every 7th request is a 16x longer prompt; a few of them hold every stream through their
    # prefill: silences that end with the long prompt's first token.
    recs = base_records(long_every=7)
    longs = [r for r in recs if r.prompt_tokens == 4096][5::20]  # a few, far apart
    for r in longs:
        pause_server([x for x in recs if x is not r], r.t_first_token - 0.45, 0.45)
    assert len(longs) >= 3
    found = find_pauses(RequestTable.load(write_run(tmp_path / "r", recs)))
    assert found == [], found


def test_silences_shorter_than_two_median_ttfts_are_not_pauses(tmp_path):
    run = _paused(tmp_path, base_records(), seconds=1.5 * BASE_TTFT_S)
    assert find_pauses(RequestTable.load(run)) == []
