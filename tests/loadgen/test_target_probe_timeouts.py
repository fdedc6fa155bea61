"""Setting up against a server that stalls on the odd request (issue 23 item 1): a request the server
accepted and did not answer is said as that, not as a server that could not be reached, and the
calibration of text prompts asks a stalled count once more instead of aborting the sweep.

The server is a real one on 127.0.0.1: /tokenize counts whitespace-separated words plus one (a BOS),
and the first `hang_first` requests are held for `hang_s` without an answer."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loadgen.calibration import calibrate
from loadgen.prompt_text import estimated_sizer
from loadgen.specs import TargetSpec
from loadgen.target_probe import TargetClient, TargetError
from rundir.ports import free_port

CLIENT_TIMEOUT_S = 0.5


class _CountingServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, hang_first: int, hang_s: float):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hang_first, self.hang_s = hang_first, hang_s
        self.received = 0
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: _CountingServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        with self.server.lock:
            self.server.received += 1
            k = self.server.received
        if k <= self.server.hang_first:
            time.sleep(self.server.hang_s)  # accepted, read, never answered in time
            return
        if self.path == "/tokenize":
            self._json(200, {"count": len(str(body.get("prompt", "")).split()) + 1})
        else:
            self._json(404, {"error": {"message": "no such route"}})

    def _json(self, status: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture
def server():
    started = []

    def start(hang_first: int = 0, hang_s: float = 2.0) -> _CountingServer:
        s = _CountingServer(hang_first, hang_s)
        threading.Thread(target=s.serve_forever, daemon=True).start()
        started.append(s)
        return s

    yield start
    for s in started:
        s.shutdown()
        s.server_close()


def _client(url: str) -> TargetClient:
    return TargetClient(TargetSpec(url, "tiny"), timeout_s=CLIENT_TIMEOUT_S)


def test_calibration_survives_one_slow_request(server):
    s = server(hang_first=1)
    with _client(f"http://127.0.0.1:{s.server_address[1]}") as client:
        sizer, notes = calibrate(client, estimated_sizer(), 64)
    assert notes == []  # nothing recorded against the server
    assert sizer.source == "server /tokenize" and sizer.exact and sizer.tokens_per_word == 1.0
    assert sizer.overhead_tokens == 1.0 and sizer.calibration.check.counted == 64


def test_a_request_accepted_and_not_answered_is_said_as_that(server):
    s = server(hang_first=1000)
    with _client(f"http://127.0.0.1:{s.server_address[1]}") as client:
        with pytest.raises(TargetError) as e:
            calibrate(client, estimated_sizer(), 64)
    msg = str(e.value)
    assert "the server accepted the request and did not answer within 0.5 s" in msg
    assert "could not connect" not in msg and type(e.value).__name__ == "TargetTimeout"
    assert s.received == 2  # asked once more, then stopped


def test_nothing_listening_is_still_a_connect_error():
    with _client(f"http://127.0.0.1:{free_port()}") as client:
        with pytest.raises(TargetError) as e:
            calibrate(client, estimated_sizer(), 64)
    assert type(e.value) is TargetError and "could not connect" in str(e.value)


def test_the_preflight_stream_says_the_server_did_not_answer(server):
    """The preflight's streaming request gets the same words (it asks once more itself, loadgen.preflight)."""
    s = server(hang_first=1)
    with _client(f"http://127.0.0.1:{s.server_address[1]}") as client:
        reply = client.stream("/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 1, "stream": True})
    assert reply.status == 0 and not reply.ok
    assert reply.message.startswith("the server accepted the request and did not answer within 0.5 s (ReadTimeout)")


def test_a_preflight_that_times_out_twice_says_so_not_broken_stream(server):
    from loadgen.preflight import preflight
    from loadgen.request_spec import RequestSpec

    s = server(hang_first=2)
    with _client(f"http://127.0.0.1:{s.server_address[1]}") as client:
        with pytest.raises(TargetError) as e:
            preflight(client, RequestSpec("hi there", 2, 1, 1), None, "text")
    msg = str(e.value)
    assert "did not answer the preflight request: the server accepted the request" in msg, msg
    assert "broken stream" not in msg
