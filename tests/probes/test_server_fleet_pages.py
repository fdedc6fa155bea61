"""A fleet behind a router that does not aggregate metrics: the server probe reads each replica's own
/metrics page (ProbeContext.replica_metrics) into per_engine, keyed by the replica's index, with the
fleet's sums; a replica never read is said once (run.json probes: "partial: ...")."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from probes.base import ProbeContext, read_rows
from probes.runner import ProbeSet
from probes.server import ServerProbe


def vllm_page(running: int, waiting: int, kv: float, generated: int, ttft_le_01: int) -> bytes:
    """A vLLM replica's page: its queue, KV cache, a token counter and a TTFT histogram."""
    return (
        f'vllm:num_requests_running{{model_name="m"}} {running}\n'
        f'vllm:num_requests_waiting{{model_name="m"}} {waiting}\n'
        f'vllm:kv_cache_usage_perc{{model_name="m"}} {kv}\n'
        f'vllm:generation_tokens_total{{model_name="m"}} {generated}\n'
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        f'vllm:time_to_first_token_seconds_bucket{{le="0.1",model_name="m"}} {ttft_le_01}\n'
        f'vllm:time_to_first_token_seconds_bucket{{le="1.0",model_name="m"}} {ttft_le_01 + 10}\n'
        f'vllm:time_to_first_token_seconds_bucket{{le="+Inf",model_name="m"}} {ttft_le_01 + 10}\n'
        f'vllm:time_to_first_token_seconds_count{{model_name="m"}} {ttft_le_01 + 10}\n'
        f'vllm:time_to_first_token_seconds_sum{{model_name="m"}} {ttft_le_01 * 0.05 + 5}\n'
    ).encode()


class Replica:
    """A loopback server whose /metrics page the test sets (None: it answers 503)."""

    def __init__(self, page: bytes | None):
        self.page = page
        replica = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = replica.page
                self.send_response(200 if body is not None and self.path == "/metrics" else 503)
                self.end_headers()
                self.wfile.write(body or b"down")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/metrics"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def replicas():
    started: list[Replica] = []

    def start(page: bytes | None) -> Replica:
        started.append(Replica(page))
        return started[-1]

    yield start
    for r in started:
        r.close()


def test_two_replicas_pages_become_per_engine_and_the_fleets_sums(tmp_path, replicas):
    a = replicas(vllm_page(running=3, waiting=0, kv=0.2, generated=1000, ttft_le_01=90))
    b = replicas(vllm_page(running=5, waiting=7, kv=0.9, generated=5000, ttft_le_01=0))
    probe = ServerProbe(ProbeContext(out_dir=tmp_path, replica_metrics=[a.url, b.url]))
    probe.check()  # no target URL needed: the pages are the fleet's
    first = probe.sample()
    assert first["up"] == 1 and first["replicas_read"] == 2 and first["engine"] == "vllm"
    assert first["per_engine"] == {
        "0": {"running": 3, "waiting": 0, "kv_usage": 0.2},
        "1": {"running": 5, "waiting": 7, "kv_usage": 0.9},
    }
    assert first["running"] == 8 and first["waiting"] == 7 and first["kv_usage"] == 0.9  # sums; KV: the fullest
    a.page = vllm_page(running=2, waiting=0, kv=0.3, generated=1100, ttft_le_01=190)
    b.page = vllm_page(running=6, waiting=9, kv=0.95, generated=5400, ttft_le_01=0)
    second = probe.sample()
    assert second["generation_tokens"] == 100 + 400  # each replica's counter differenced, then summed
    assert second["ttft_count"] == 100 and second["ttft_p50_lt_s"] == 0.1  # replica 0's 100 new, all fast
    assert probe.failure() is None and probe.shortfall() is None


def test_a_replica_missed_by_one_scrape_neither_resets_nor_inflates_the_counters(tmp_path, replicas):
    a = replicas(vllm_page(1, 0, 0.1, generated=1000, ttft_le_01=0))
    b = replicas(vllm_page(1, 0, 0.1, generated=9000, ttft_le_01=0))
    probe = ServerProbe(ProbeContext(out_dir=tmp_path, replica_metrics=[a.url, b.url]))
    probe.sample()
    b.page = None
    a.page = vllm_page(1, 0, 0.1, generated=1010, ttft_le_01=0)
    down = probe.sample()
    assert down["replicas_read"] == 1 and set(down["per_engine"]) == {"0"} and "replica 1" in down["error"]
    assert down["generation_tokens"] == 10  # not 1010 - 10000 read as a reset
    b.page = vllm_page(1, 0, 0.1, generated=9050, ttft_le_01=0)
    a.page = vllm_page(1, 0, 0.1, generated=1020, ttft_le_01=0)
    back = probe.sample()
    assert back["generation_tokens"] == 10 + 50  # replica 1's count while missed lands here


def test_a_replica_never_read_is_said_once_as_partial(tmp_path, replicas):
    a = replicas(vllm_page(1, 0, 0.1, 10, 0))
    b = replicas(None)
    pset = ProbeSet(
        ["server"], ProbeContext(out_dir=tmp_path, replica_metrics=[a.url, b.url], interval_s=0.05), log=lambda _m: None
    )
    assert pset.start() == {"server": "ok"}
    time.sleep(0.3)
    outcome = pset.outcome(pset.stop())
    assert outcome["server"] == (f"partial: replica 1 ({b.url}) was never read (HTTP Error 503: Service Unavailable)")
    rows = read_rows(tmp_path / "probes" / "server.jsonl")
    assert rows and all(r["up"] == 1 and set(r["per_engine"]) == {"0"} for r in rows)


def test_no_replica_read_is_failed(tmp_path, replicas):
    a, b = replicas(None), replicas(None)
    probe = ServerProbe(ProbeContext(out_dir=tmp_path, replica_metrics=[a.url, b.url]))
    row = probe.sample()
    assert row["up"] == 0 and "replica 0" in row["error"] and "replica 1" in row["error"]
    assert probe.failure().startswith("every scrape of the 2 replicas' /metrics pages")
    assert probe.shortfall() is None


def test_llmdiag_probe_reads_the_replicas_behind_a_router(tmp_path, replicas):
    """`llmdiag probe --target ROUTER --replica-metrics P0,P1`: the run records the pages and the
    replica count, and the server probe's rows carry per_engine, as a sweep's would."""
    from typer.testing import CliRunner

    from llmbench.diag_cli import app
    from rundir import RunDir

    a = replicas(vllm_page(2, 0, 0.2, 10, 0))
    b = replicas(vllm_page(4, 1, 0.5, 10, 0))
    router = "http://127.0.0.1:9"  # never read: the server probe reads the pages behind it
    out = tmp_path / "watch"
    args = ["probe", "--probes", "server", "--duration", "1s", "--interval", "0.2", "--target", router]
    res = CliRunner().invoke(app, [*args, "--replica-metrics", f"{a.url},{b.url}", "--out", str(out)])
    assert res.exit_code == 0, res.output
    info = RunDir(out).read_info()
    assert info.target.replicas == 2 and info.target.replica_metrics == [a.url, b.url]
    assert info.probes["server"] == "ok"
    rows = read_rows(out / "probes" / "server.jsonl")
    assert rows and rows[-1]["per_engine"]["1"] == {"running": 4, "waiting": 1, "kv_usage": 0.5}
    # The router's own page as a replica's is a mistake, said in one line.
    bad = CliRunner().invoke(
        app, [*args, "--replica-metrics", f"{router}/metrics,{a.url}", "--out", str(tmp_path / "bad")]
    )
    assert bad.exit_code == 2 and "the --target's own page" in bad.output and not (tmp_path / "bad").exists()
