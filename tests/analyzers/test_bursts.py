"""Streams read in one burst (issue 26, analyzers/bursts.py): a paced stream, a burst, a server
that packs tokens into chunks, streams too short to judge; and a run directory whose level's
verdict fails with the sentence, with and without the server probe's ITL."""

from __future__ import annotations

import json

import numpy as np
import pytest
from synth_run import T0, make_run, rec

from analyzers.bursts import (
    BUFFERED_READ_S,
    MIN_BURSTS,
    BurstReads,
    judge_record,
    level_bursts,
    server_itl_mean,
)
from analyzers.probe_series import read_probe
from analyzers.summary import analyze_run
from analyzers.triage.client_lag import LAG_ID
from analyzers.triage.p99 import diagnose_p99
from analyzers.validity import INVALID_PREFIX
from reports.answer import build_answer
from rundir.table import RequestTable

STEP = 0.020  # the server's decode step in these records


def paced(t: float, n: int = 20, level: str = "c1"):
    """A stream read as it was decoded: one chunk per STEP."""
    return rec(t, 0.05, 0.05 + (n - 1) * STEP, n, level=level, itl=[STEP] * (n - 1))


def burst(t: float, n: int = 20, level: str = "c1", gap: float = 10e-6):
    """A stream read after the fact: the first chunk late, the rest back to back (10 us a line)."""
    ttft = 0.05 + (n - 1) * STEP  # the client's clock saw the whole decode as TTFT
    return rec(t, ttft, ttft + (n - 1) * gap, n, level=level, itl=[gap] * (n - 1))


def packed(t: float, n_tokens: int = 40, per_chunk: int = 4):
    """A server that sends four tokens a chunk (vLLM's --stream-interval 4): fewer chunks than tokens,
    each gap four steps long."""
    chunks = n_tokens // per_chunk
    r = rec(t, 0.05, 0.05 + (chunks - 1) * per_chunk * STEP, n_tokens, itl=[per_chunk * STEP] * (chunks - 1))
    r.client_token_chunks = chunks
    return r


def test_paced_burst_and_packed_streams_are_told_apart():
    for itl in (None, STEP):  # absolute bounds, then the server's ITL
        assert judge_record(paced(0), itl) == "paced"
        assert judge_record(burst(0), itl) == "burst"
        assert judge_record(packed(0), itl) == "paced"  # chunks < tokens is no burst


def test_short_streams_are_not_judged():
    assert judge_record(burst(0, n=2)) == "unjudged"  # one gap cannot tell a burst from a step
    assert judge_record(rec(0, 0.05, 0.05, 1)) == "unjudged"
    assert judge_record(burst(0, n=3)) == "burst"


def test_server_bunching_as_it_decodes_is_no_burst():
    """A server (or proxy) that sends five chunks at a time every five steps: most gaps are buffered
    reads, but the stream spans the server's decode time, so the client measured what it was sent."""
    gaps = ([5 * STEP] + [BUFFERED_READ_S / 10] * 4) * 4
    r = rec(0, 0.05, 0.05 + sum(gaps), len(gaps) + 1, itl=gaps)
    assert judge_record(r) == "paced" and judge_record(r, STEP) == "paced"


def test_fast_real_steps_against_the_servers_itl():
    """Gaps of 0.3 ms are no buffered read for a server whose own ITL is 0.3 ms, and the span matches
    its decode: paced. The same gaps against a server that says it steps at 20 ms: a burst."""
    r = rec(0, 0.01, 0.01 + 19 * 3e-4, 20, itl=[3e-4] * 19)
    assert judge_record(r, 3e-4) == "paced"
    assert judge_record(r, STEP) == "burst"


def test_level_share_and_minimum():
    recs = [burst(i) for i in range(MIN_BURSTS)] + [paced(10 + i) for i in range(40)]
    recs += [rec(60, 0.05, 0.05, 1)]
    b = level_bursts(RequestTable.from_records(recs), np.arange(len(recs)))
    assert (b.judged, b.bursts, b.unjudged) == (43, 3, 1) and b.fails
    assert b.words().startswith(
        "3 of 43 streams (1 more too short to judge) arrived in one burst: the client fell "
        "behind the server and its TTFT/TPOT are not measured; pin the server and the client "
        "to separate cores (taskset)"
    )
    few = BurstReads(judged=100, bursts=MIN_BURSTS - 1, unjudged=0, server_itl_s=None, gap_limit_s=BUFFERED_READ_S)
    assert not few.fails and "too few to fail" in few.words()
    assert not BurstReads(judged=100, bursts=4, unjudged=0, server_itl_s=None, gap_limit_s=1e-4).fails  # < 5%
    with pytest.raises(ValueError):
        BurstReads(judged=1, bursts=2, unjudged=0, server_itl_s=None, gap_limit_s=1e-4)


def _server_probe(run, itl_mean_s: float, seconds: int = 12):
    """Server probe rows, one a second, with the server's own ITL histogram interval means."""
    with open(run.probe_file("server"), "w") as f:
        for i in range(seconds):
            f.write(
                json.dumps({"t": T0 + i, "up": 1, "engine": "vllm", "itl_count": 50, "itl_mean_s": itl_mean_s}) + "\n"
            )


def test_server_itl_mean_over_the_window(tmp_path):
    run = make_run(tmp_path / "r", [paced(0)])
    _server_probe(run, STEP)
    series = read_probe(run.probe_file("server"))
    assert server_itl_mean(series, T0 + 2, T0 + 5) == pytest.approx(STEP)
    assert server_itl_mean(series, None, T0 + 5) is None and server_itl_mean(None, T0, T0 + 5) is None


@pytest.mark.parametrize("with_server", [False, True])
def test_a_level_of_burst_streams_is_invalid(tmp_path, with_server):
    """77 of 114 streams read in one burst at concurrency 1 (issue 26's numbers): the level is
    INVALID with the sentence, has no SLO verdict, and the report does not call it valid."""
    recs = [burst(0.1 * i) if i % 3 else paced(0.1 * i) for i in range(114)]
    recs += [burst(0.1 * i, level="c2") if i == 0 else paced(0.1 * i, level="c2") for i in range(60)]
    run = make_run(tmp_path / "r", recs, windows={"c1": (0, 12), "c2": (0, 12)})
    if with_server:
        _server_probe(run, STEP)
    summary, _ = analyze_run(run)
    lv = {x.level_id: x for x in summary.levels}
    bad, good = lv["c1"], lv["c2"]
    words = (
        "76 of 114 streams arrived in one burst: the client fell behind the server and its TTFT/TPOT are "
        "not measured; pin the server and the client to separate cores (taskset)"
    )
    assert words in bad.slo_broken
    note = (
        "INVALID: the client fell behind (76 of 114 streams arrived in one burst: its TTFT/TPOT are not "
        "measured; pin the server and the client to separate cores (taskset))"
    )
    assert note in bad.notes
    assert bad.slo_met is None and (bad.burst_streams, bad.burst_judged) == (76, 114)
    assert bad.burst_server_itl_s == (pytest.approx(STEP) if with_server else None)
    assert good.slo_met is True and not any(n.startswith(INVALID_PREFIX) for n in good.notes)
    assert any("1 of 60 streams arrived in one burst" in n for n in good.notes)  # noted, not failed
    (behind,) = [f for f in summary.finding_groups if f.kind == "client_behind"]
    assert behind.severity == "invalid" and behind.levels == ["c1"]
    assert behind.text == (
        "the client fell behind: c1 (76 of 114 streams arrived in one burst: its TTFT/TPOT are "
        "not measured; pin the server and the client to separate cores (taskset))."
    )
    assert summary.best is not None and summary.best.level_id == "c2"
    validity = next(i for i in build_answer(summary) if i.label == "Validity")
    assert validity.text.startswith("not valid as it stands")


def test_two_failing_levels_are_one_finding_with_each_levels_numbers(tmp_path):
    recs = [burst(0.1 * i) if i % 2 else paced(0.1 * i) for i in range(40)]
    recs += [burst(0.1 * i, level="c2") if i < 5 else paced(0.1 * i, level="c2") for i in range(50)]
    summary, _ = analyze_run(make_run(tmp_path / "r", recs, windows={"c1": (0, 12), "c2": (0, 12)}))
    (behind,) = [f for f in summary.finding_groups if f.kind == "client_behind"]
    assert behind.levels == ["c1", "c2"]
    assert "c1 (20 of 40 streams arrived" in behind.text and "c2 (5 of 50 streams arrived" in behind.text


def test_the_p99_client_lag_check_fails_on_burst_reads(tmp_path):
    recs = [burst(0.2 * i) if i % 2 else paced(0.2 * i) for i in range(60)]
    run = make_run(tmp_path / "r", recs, windows={"c1": (0, 12)})
    diag = diagnose_p99(run)
    check = next(c for c in diag.checks if c.check_id == LAG_ID)
    assert check.status == "failed" and "c1 (30 of 60)" in check.finding.title
    assert diag.findings and diag.findings[0].check_id == LAG_ID  # a cause, not context
    assert diag.headline.startswith("the client fell behind the server")
    assert "taskset" in check.finding.next_step


def test_the_p99_client_lag_check_passes_paced_streams(tmp_path):
    run = make_run(tmp_path / "r", [paced(0.2 * i) for i in range(60)], windows={"c1": (0, 12)})
    check = next(c for c in diagnose_p99(run).checks if c.check_id == LAG_ID)
    assert check.status == "passed" and "0 of 60 streams arrived in one burst" in check.detail


def _host_probe(run, client_wait_share: float, seconds: int = 14):
    """Host probe rows, one a second, with the load generator's own run-queue wait share."""
    with open(run.probe_file("host"), "w") as f:
        for i in range(seconds):
            row = {"t": T0 + i, "cpu_pct": 12.0, "client_cpu_cores": 0.05, "client_cpu_wait_share": client_wait_share}
            f.write(json.dumps(row) + "\n")


@pytest.mark.parametrize("waited", [0.03, 0.5])
def test_bursts_are_the_clients_only_where_it_waited_for_a_cpu(tmp_path, waited):
    """The same 30 of 60 bursts: with the load generator waiting for a CPU 3% of its runnable time, it
    read each chunk as it came and the server sent them so (measured, a note; the check passes and says
    so); waiting 50%, it fell behind (INVALID, the check fails) as without a host probe."""
    recs = [burst(0.2 * i) if i % 2 else paced(0.2 * i) for i in range(60)]
    run = make_run(tmp_path / "r", recs, windows={"c1": (0, 12)})
    _host_probe(run, waited)
    summary, _ = analyze_run(run)
    (lv,) = summary.levels
    check = next(c for c in diagnose_p99(run).checks if c.check_id == LAG_ID)
    if waited < 0.2:
        assert lv.slo_met is not None and not any(n.startswith(INVALID_PREFIX) for n in lv.notes), lv.notes
        assert any("the server sent them so" in n and "only 3% of its runnable time" in n for n in lv.notes), lv.notes
        assert check.status == "passed" and "c1 (30 of 60, the client waiting 3%)" in check.detail, check.detail
        assert lv.burst_client_wait_share == pytest.approx(0.03)
    else:
        assert lv.slo_met is None and any(n.startswith(INVALID_PREFIX) for n in lv.notes)
        assert check.status == "failed" and "c1 (30 of 60)" in check.finding.title
