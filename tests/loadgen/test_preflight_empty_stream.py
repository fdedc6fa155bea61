"""A preflight stream that ends before its first token says the server's own reason: llama.cpp's
server answers a prompt that fills its context with one empty choice and finish_reason 'length'."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loadgen.preflight import preflight
from loadgen.request_spec import RequestSpec
from loadgen.specs import TargetSpec
from loadgen.target_probe import TargetClient, TargetError


class _EmptyStream(BaseHTTPRequestHandler):
    finish_reason = "length"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        chunk = {"choices": [{"index": 0, "text": "", "finish_reason": self.finish_reason}]}
        data = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize(
    "finish, words", [("length", "may fill the server's context"), ("stop", "the model ended at once")]
)
def test_an_empty_preflight_stream_names_the_servers_reason(finish, words):
    handler = type("H", (_EmptyStream,), {"finish_reason": finish})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with TargetClient(TargetSpec(f"http://127.0.0.1:{httpd.server_address[1]}", "m"), timeout_s=10) as client:
            with pytest.raises(TargetError) as e:
                preflight(client, RequestSpec("a b c", 900, 8, 8), None, "text")
    finally:
        httpd.shutdown()
    msg = str(e.value)
    assert "no generated text" in msg and f"finish_reason '{finish}' before any token" in msg and words in msg, msg
