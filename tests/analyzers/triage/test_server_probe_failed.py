"""A run whose server probe never read a page (the target has no /metrics: every scrape 404s):
`llmdiag p99` says the server probe failed and why, not "no server probe", and the run's validity
says it once. The rows come from the real server probe scraping a loopback server that 404s."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from planted import base_records, clean_probes, write_run

from analyzers.summary import analyze_run
from analyzers.triage.p99 import diagnose_p99
from probes.base import ProbeContext
from probes.server import ServerProbe
from reports.answer import build_answer


class _NotFound(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def no_metrics():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def _run(tmp_path, url: str, status: str | None):
    recs = base_records(n=200)
    probes = clean_probes(recs[0].t_sent - 1, max(r.t_done for r in recs) + 1)
    probe = ServerProbe(ProbeContext(out_dir=tmp_path, target_url=url))
    rows = []
    for row in probes["server"]:
        scraped = probe.sample()
        rows.append(scraped | {"t": row["t"]})  # on the run's (planted) clock
    probes["server"] = rows
    run = write_run(tmp_path / "r", recs, probes, url=url)
    info = run.read_info()
    info.probes = {"server": status if status is not None else f"failed: {probe.failure()}", "host": "ok"}
    run.write_info(info)
    return run


def _server_checks(run) -> dict[str, str]:
    return {
        c.check_id: c.detail
        for c in diagnose_p99(run).checks
        if c.check_id in ("p99.sched.preemption", "p99.sched.queueing")
    }


def test_p99_says_the_server_probe_failed_and_why(tmp_path, no_metrics):
    run = _run(tmp_path, no_metrics, None)
    assert (
        run.read_info().probes["server"]
        == f"failed: every scrape of {no_metrics}/metrics failed (HTTP Error 404: Not Found)"
    )
    details = _server_checks(run)
    assert len(details) == 2
    for detail in details.values():
        assert (
            detail == f"the server probe failed: every scrape of {no_metrics}/metrics failed "
            "(HTTP Error 404: Not Found)"
        ), detail
        assert "no server probe" not in detail
    # the run's validity says it once
    validity = next(a for a in build_answer(analyze_run(run)[0]) if a.label == "Validity")
    said = [e for e in validity.evidence if "server probe" in e]
    assert len(said) == 1 and "HTTP Error 404: Not Found" in said[0], validity.evidence


def test_an_older_run_that_said_ok_is_read_from_its_rows(tmp_path, no_metrics):
    run = _run(tmp_path, no_metrics, "ok")  # written before run.json's probes said "failed"
    for detail in _server_checks(run).values():
        assert detail.startswith("the server probe failed: none of its ") and "HTTP Error 404: Not Found" in detail
