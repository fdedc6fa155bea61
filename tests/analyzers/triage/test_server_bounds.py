"""The P99 diagnosis never uses an invented server quantile: against vLLM (request-phase buckets
from 0.3 s) a 0.01 ms or a 250 ms queue time has a P99 known only as "< 300 ms", and that is what it
says.

The server rows come from the server probe itself, fed vLLM-shaped pages (prometheus_client, as
vLLM exports them, with vLLM 0.32's names and buckets)."""

from __future__ import annotations

import json

from planted import base_records, clean_probes, delay_in_episodes, write_run
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from analyzers.summary import analyze_run
from analyzers.triage.p99 import diagnose_p99
from probes.base import ProbeContext
from probes.server import ServerProbe
from reports.answer import build_answer
from reports.evidence_units import evidence_name, fmt_evidence

REQUEST_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


class _VllmPage:
    def __init__(self):
        self.reg = CollectorRegistry()
        labels = ["engine", "model_name"]
        self.queue = Histogram(
            "vllm:request_queue_time_seconds", "queue", labels, buckets=REQUEST_BUCKETS, registry=self.reg
        ).labels("0", "m")
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "e2e", labels, buckets=REQUEST_BUCKETS, registry=self.reg
        ).labels("0", "m")
        self.waiting = Gauge("vllm:num_requests_waiting", "w", labels, registry=self.reg).labels("0", "m")
        self.running = Gauge("vllm:num_requests_running", "r", labels, registry=self.reg).labels("0", "m")

    def text(self) -> str:
        return generate_latest(self.reg).decode()


def _queued_run(tmp_path):
    recs = base_records()
    t0 = recs[0].t_sent
    windows = delay_in_episodes(recs)
    probes = clean_probes(t0 - 1, max(r.t_done for r in recs) + 1)
    page, scraper = _VllmPage(), ServerProbe(ProbeContext(out_dir=tmp_path, target_url="http://127.0.0.1:9"))
    rows = []
    for row in probes["server"]:
        t = row["t"]
        spike = any(t - 1.0 < e and t > s for s, e in windows)
        page.waiting.set(6 if spike else 0)
        page.running.set(8)
        for _ in range(8):
            # vLLM on CPU queued nothing: its own mean queue time was 0.01 ms. In the episodes the
            # requests queue for 0.25 s: a time below vLLM's first bucket edge too.
            page.queue.observe(0.25 if spike else 1e-5)
            page.e2e.observe(0.7)
        rows.append(scraper.row_from_text(page.text(), t))
    probes["server"] = rows[1:]  # the first scrape holds no interval
    return write_run(tmp_path / "r", recs, probes)


def test_queueing_evidence_says_below_the_first_bucket_not_a_number(tmp_path):
    run = _queued_run(tmp_path)
    row = json.loads(run.probe_file("server").read_text().splitlines()[5])
    assert row["queue_time_p99_s"] is None and row["queue_time_p99_lt_s"] == 0.3  # was 0.297
    assert 0.5 < row["e2e_p99_s"] <= 0.8 and row["e2e_p99_bucket_s"] == [0.5, 0.8]
    diag = diagnose_p99(run)
    f = next(f for f in diag.findings if f.check_id == "p99.sched.queueing")
    assert f.evidence["queue_time_p99_spikes_lt_s"] == 0.3 and "queue_time_p99_spikes_s" not in f.evidence
    assert 1e-5 < f.evidence["queue_time_mean_spikes_s"] <= 0.25  # the mean is a number: sum/count, exact
    assert abs(f.evidence["queue_time_mean_calm_s"] - 1e-5) < 1e-9
    assert "P99 < 300 ms" in f.title and "mean 167 ms" in f.title, f.title
    # the report renders the bound, not a number: its Diagnosis table (every key) and the answer's sentences
    run.write_json(run.diagnosis_p99_json, diag.to_dict())
    table = "; ".join(f"{evidence_name(k)} {fmt_evidence(k, v)}" for k, v in f.evidence.items())
    assert "queue time p99 spikes < 300 ms" in table and "297" not in table, table
    answer = {a.label: a for a in build_answer(analyze_run(run)[0], diag.to_dict())}
    evidence = " | ".join(answer["Why the tail"].evidence)
    assert "297" not in evidence and "Requests waiting (mean): 4 in the spike windows, 0 in the calm." in evidence


def test_the_report_panel_draws_a_bound_as_a_bound(tmp_path):
    from analyzers.probe_series import read_probe
    from reports.probe_panels import server_panels

    run = _queued_run(tmp_path)
    p = server_panels(read_probe(run.probe_file("server"), "server"))
    p99 = p.panels["server-side P99 latency per scrape interval (ms)"]
    assert "queue time" not in p99 and set(p99["queue time: below this (first bucket)"]) == {300.0}
    assert "e2e" in p99  # interpolated within (0.5, 0.8]: a number
    assert "queue time" in p.panels["server-side mean latency per scrape interval (ms, sum/count)"]
    assert "queue_time_p99_lt_s" in p.used and "e2e_p99_bucket_s.1" in p.used
