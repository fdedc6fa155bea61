"""Failed requests are the tail by definition (their latency is unbounded): `llmdiag p99` counts
their share of each level's P99 tail and names them, by kind, before any latency cause; timeouts
under load leave the load as the cause."""

from __future__ import annotations

import numpy as np
from planted import base_records, clean_probes, write_run

from analyzers.triage.p99 import diagnose_p99


def _fail(recs, every: int, kind: str, message: str, status: str = "error") -> int:
    n = 0
    for i, r in enumerate(recs):
        if i % every == 0:
            r.status, r.error_kind, r.error = status, kind, message
            r.t_first_token, r.ttft_s, r.tpot_s = None, None, None
            n += 1
    return n


def _diagnose(tmp_path, recs):
    probes = clean_probes(recs[0].t_sent - 1, max(r.t_done for r in recs) + 1)
    return diagnose_p99(write_run(tmp_path / "r", recs, probes))


def test_streams_cut_by_the_server_are_named_first_with_their_share_of_the_tail(tmp_path):
    recs = base_records(n=400)
    n = _fail(recs, 10, "cut_off", "cut off by the server: [DONE] without a finish_reason after 1 token")
    diag = _diagnose(tmp_path, recs)
    first = diag.findings[0]
    assert first.check_id == "p99.failures", [f.title for f in diag.findings]
    assert first.coverage == 1.0 and f"{n} of 400 requests failed ({n} cut off by the server)" in first.title
    assert "--interrupt_requests False" in first.next_step
    assert first.evidence["sample_error"].startswith("cut off by the server")


def test_one_failure_in_a_thousand_is_part_of_the_tail_not_all_of_it(tmp_path):
    recs = base_records(n=1000)
    _fail(recs, 1000, "http_status", "HTTP 503: queue full")  # 1 of 10 tail requests
    diag = _diagnose(tmp_path, recs)
    check = next(c for c in diag.checks if c.check_id == "p99.failures")
    assert check.status == "failed" and np.isclose(check.finding.coverage, 0.1)
    assert check.finding in diag.context  # under the 20% a cause needs


def test_no_failure_passes(tmp_path):
    diag = _diagnose(tmp_path, base_records(n=300))
    check = next(c for c in diag.checks if c.check_id == "p99.failures")
    assert check.status == "passed" and not any(f.check_id == "p99.failures" for f in diag.findings)


def test_timeouts_do_not_silence_the_load_that_caused_them(tmp_path):
    from analyzers.triage.failures import is_consequence_of_load

    recs = base_records(n=400)
    _fail(recs, 20, "timeout", "deadline passed while streaming", status="timeout")
    diag = _diagnose(tmp_path, recs)
    f = next(f for f in diag.findings if f.check_id == "p99.failures")
    assert is_consequence_of_load(f) and "timed out" in f.title
