"""server probe: vLLM (new and old names), SGLang and TGI pages map onto one set; histograms become
per-interval quantiles; a live prometheus_client server on loopback; bad pages and dead targets."""

import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from probes.base import ProbeContext, ProbeUnavailable
from probes.prom import Histogram as H
from probes.prom import histogram_delta, parse_metrics, quantile
from probes.server import ServerProbe

DATA = os.path.join(os.path.dirname(__file__), "data")


def _page(name):
    return open(os.path.join(DATA, name)).read()


def test_vllm_v1_names():
    s = parse_metrics(_page("vllm_v1_metrics.txt"))
    assert s.engine == "vllm"
    assert s.values["kv_usage"] == 0.8712 and s.values["running"] == 28 and s.values["waiting"] == 4
    assert s.values["preemptions_total"] == 17 and s.values["prefix_cache_hits_total"] == 262144
    assert s.histograms["ttft"].count == 4680 and s.histograms["queue_time"].buckets[1.0] == 4600


def test_vllm_v0_names():
    s = parse_metrics(_page("vllm_v0_metrics.txt"))
    assert s.values["kv_usage"] == 0.42 and s.values["prefix_cache_hit_rate_gauge"] == 0.35
    assert "itl" in s.histograms and s.histograms["itl"].count == 20000


def test_sglang_names():
    s = parse_metrics(_page("sglang_metrics.txt"))
    assert s.engine == "sglang"
    assert s.values["kv_usage"] == 0.28 and s.values["running"] == 162 and s.values["waiting"] == 2826
    assert s.values["generation_tokens_total"] == 7.557572e06 and set(s.histograms) == {"ttft", "e2e"}


def test_tgi_names():
    s = parse_metrics(_page("tgi_metrics.txt"))
    assert s.engine == "tgi" and s.values["running"] == 24 and s.values["waiting"] == 7
    assert s.values["generation_tokens_total"] == 15000 and s.histograms["queue_time"].count == 100


def test_quantiles_follow_prometheus_histogram_quantile():
    h = H(buckets={0.1: 10, 0.5: 60, 1.0: 100, float("inf"): 100}, count=100, sum=40)
    assert quantile(h, 0.5) == pytest.approx(0.1 + 0.4 * (50 - 10) / 50)
    assert quantile(h, 0.99) == pytest.approx(0.5 + 0.5 * (99 - 60) / 40)
    assert quantile(H(buckets={1.0: 0, float("inf"): 5}), 0.5) is None  # only "> 1.0" is known
    assert quantile(H(buckets={1.0: 0, float("inf"): 0}), 0.5) is None


def test_interval_quantiles_come_from_the_difference_of_two_scrapes(tmp_path):
    probe = ServerProbe(ProbeContext(out_dir=tmp_path, target_url="http://127.0.0.1:9"))
    reg = CollectorRegistry()
    h = Histogram("vllm:time_to_first_token_seconds", "ttft", buckets=(0.1, 1.0, 10.0), registry=reg)
    g = Counter("vllm:generation_tokens", "gen", registry=reg)
    for _ in range(1000):
        h.observe(0.05)  # history before the probe started
    first = probe.row_from_text(generate_latest(reg).decode(), t=100.0)
    for _ in range(10):
        h.observe(5.0)  # this interval: all slow
    g.inc(500)
    second = probe.row_from_text(generate_latest(reg).decode(), t=102.0)
    assert "ttft_count" not in first
    assert second["ttft_count"] == 10 and second["ttft_mean_s"] == pytest.approx(5.0)
    assert 1.0 < second["ttft_p50_s"] <= 10.0  # the old fast history does not dilute it
    assert second["generation_tokens"] == 500 and second["generation_tok_s"] == 250


def test_counter_reset_is_not_a_negative_delta():
    a = H(buckets={1.0: 50, float("inf"): 50}, count=50, sum=10)
    b = H(buckets={1.0: 3, float("inf"): 3}, count=3, sum=1)
    assert histogram_delta(a, b).count == 3


def test_unknown_format_is_an_error_row_not_a_crash(tmp_path):
    probe = ServerProbe(ProbeContext(out_dir=tmp_path, target_url="http://127.0.0.1:9"))
    row = probe.row_from_text("<html><body>Not Found</body></html>", t=1.0)
    assert row["up"] == 1 and "not Prometheus text format" in row["error"]
    row = probe.row_from_text("# TYPE foo gauge\nfoo 1\n", t=2.0)
    assert "no refengine/vLLM/SGLang/TGI metric names" in row["error"]


class _MetricsHandler(BaseHTTPRequestHandler):
    registry = None

    def do_GET(self):
        body = generate_latest(self.registry)
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_live_scrape_of_a_loopback_server(tmp_path):
    reg = CollectorRegistry()
    running = Gauge("vllm:num_requests_running", "r", registry=reg)
    kv = Gauge("vllm:kv_cache_usage_perc", "kv", registry=reg)
    q = Counter("vllm:prefix_cache_queries", "q", registry=reg)
    hits = Counter("vllm:prefix_cache_hits", "h", registry=reg)
    handler = type("H", (_MetricsHandler,), {"registry": reg})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        probe = ServerProbe(ProbeContext(out_dir=tmp_path, target_url=f"http://127.0.0.1:{server.server_port}"))
        probe.check()
        running.set(3)
        kv.set(0.5)
        probe.sample()
        q.inc(100)
        hits.inc(25)
        running.set(7)
        row = probe.sample()
        assert row["up"] == 1 and row["running"] == 7 and row["kv_usage"] == 0.5
        assert row["prefix_cache_hit_rate"] == 0.25 and row["scrape_s"] >= 0
    finally:
        server.shutdown()
        server.server_close()


def test_unreachable_target_writes_up_zero(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    probe = ServerProbe(ProbeContext(out_dir=tmp_path, target_url=f"http://127.0.0.1:{port}"))
    row = probe.sample()
    assert row["up"] == 0 and "cannot scrape" in row["error"]


def test_no_target_cannot_run(tmp_path):
    with pytest.raises(ProbeUnavailable, match="no target URL"):
        ServerProbe(ProbeContext(out_dir=tmp_path)).check()
