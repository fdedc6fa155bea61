"""A server probe none of whose scrapes read a page measured nothing: run.json's probes says
"failed: every scrape of URL failed (why)", not "ok" (llama.cpp's Python server has no /metrics)."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from probes.base import ProbeContext, read_rows
from probes.runner import ProbeSet


def serve(status: int, body: bytes) -> ThreadingHTTPServer:
    """A loopback HTTP server answering every GET with `status` and `body`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def url_of():
    servers = []

    def start(status: int, body: bytes) -> str:
        servers.append(serve(status, body))
        return f"http://127.0.0.1:{servers[-1].server_port}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def _run_probe(tmp_path, url: str) -> dict[str, str]:
    pset = ProbeSet(["server"], ProbeContext(out_dir=tmp_path, target_url=url, interval_s=0.05), log=lambda _m: None)
    assert pset.start() == {"server": "ok"}  # its check cannot know yet
    time.sleep(0.3)
    return pset.outcome(pset.stop())


def test_every_scrape_404s_is_failed_not_ok(tmp_path, url_of):
    url = url_of(404, b'{"detail": "Not Found"}')
    outcome = _run_probe(tmp_path, url)
    assert outcome["server"] == f"failed: every scrape of {url}/metrics failed (HTTP Error 404: Not Found)"
    rows = read_rows(tmp_path / "probes" / "server.jsonl")
    assert rows and all(r["up"] == 0 and "HTTP Error 404: Not Found" in r["error"] for r in rows)


def test_a_page_without_known_names_is_failed_too(tmp_path, url_of):
    url = url_of(200, b"# TYPE http_requests_total counter\nhttp_requests_total 3\n")
    outcome = _run_probe(tmp_path, url)
    assert outcome["server"].startswith(f"failed: every scrape of {url}/metrics failed (no refengine/vLLM/SGLang/TGI")


def test_a_page_that_reads_is_ok(tmp_path, url_of):
    url = url_of(200, b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\n")
    assert _run_probe(tmp_path, url) == {"server": "ok"}
