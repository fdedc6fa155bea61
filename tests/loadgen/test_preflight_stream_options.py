"""continuous_usage_stats is refusable on its own: a server that refuses it keeps include_usage
(loadgen/openai_body.py, loadgen/preflight.py), whether its refusal names the inner field or only
stream_options."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loadgen.openai_body import fixed_output_len, request_dict
from loadgen.preflight import preflight
from loadgen.specs import TargetSpec
from loadgen.target_probe import TargetClient
from loadgen.workloads import RequestSpec


class _Picky(BaseHTTPRequestHandler):
    refusal = ""
    bodies: list[dict] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        type(self).bodies.append(body)
        extra = set(body.get("stream_options") or {}) - {"include_usage"}
        if extra:
            payload = json.dumps({"error": {"message": type(self).refusal}}).encode()
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        n = body["max_tokens"]
        parts = [
            {"choices": [{"index": 0, "text": " w", "finish_reason": "length" if i == n - 1 else None}]}
            for i in range(n)
        ]
        if (body.get("stream_options") or {}).get("include_usage"):
            parts.append({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n}})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for p in parts:
            self.wfile.write(b"data: " + json.dumps(p).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(
    "refusal",
    ["stream_options.continuous_usage_stats: Extra inputs are not permitted", "Unrecognized keys in stream_options"],
)
def test_refused_continuous_usage_keeps_include_usage(refusal):
    handler = type("Picky", (_Picky,), {"refusal": refusal, "bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        spec = RequestSpec("hello there", 0, 4, 4)
        with TargetClient(TargetSpec(f"http://127.0.0.1:{server.server_address[1]}", "m")) as client:
            res = preflight(client, spec, None, "text")
    finally:
        server.shutdown()
        server.server_close()
    assert handler.bodies[0]["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert res.target.omit_fields == ["continuous_usage_stats"]
    assert [a.field for a in res.adaptations] == ["continuous_usage_stats"]
    assert request_dict(spec, res.target)["stream_options"] == {"include_usage": True}
    assert res.reply.stream.completion_tokens == 4  # usage still came


def test_fixed_output_len_is_what_the_body_pins():
    assert fixed_output_len({"max_tokens": 8, "ignore_eos": True}) == 8
    assert fixed_output_len({"max_tokens": 8, "min_tokens": 8}) == 8
    assert fixed_output_len({"max_tokens": 8, "min_tokens": 2}) is None
    assert fixed_output_len({"max_tokens": 8}) is None
    target = TargetSpec("http://x", "m", omit_fields=["ignore_eos"])
    assert fixed_output_len(request_dict(RequestSpec("hi", 0, 8, 8), target)) is None
