"""The SSE reader on streams shaped like real engines' (issue 26), served over loopback HTTP:
vLLM's empty-text chunks for a partial UTF-8 character with continuous usage, llama-cpp-python's
server cutting a running stream ([DONE] without a finish_reason) and streaming without usage,
transformers serve's finish without [DONE]."""

from __future__ import annotations

import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loadgen.sse import read_sse_stream, short_of_fixed_length


def chunk(text: str = "", finish: str | None = None, usage: int | None = None, **choice) -> bytes:
    obj: dict = {
        "id": "x",
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": finish, **choice}],
    }
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": usage, "total_tokens": 5 + usage}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def usage_only(n: int) -> bytes:
    body = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
GAP_S = 0.03  # between the replayed chunks


class _Replay(BaseHTTPRequestHandler):
    stream: list[bytes] = []

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for part in type(self).stream:
            self.wfile.write(part)
            self.wfile.flush()
            time.sleep(GAP_S)

    def log_message(self, *args):
        pass


def replay(parts: list[bytes]):
    """Serve `parts` as one SSE response on a loopback port and read it with read_sse_stream."""
    handler = type("Replay", (_Replay,), {"stream": parts})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
        t_sent = time.time()
        conn.request("POST", "/v1/completions", body=b"{}", headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return read_sse_stream(resp.fp.readline), t_sent
    finally:
        server.shutdown()
        server.server_close()


def test_vllm_empty_text_first_chunk_with_continuous_usage_is_the_first_token():
    # vLLM: the first token ends inside a UTF-8 character, so its chunk has no text; usage rises.
    r, _ = replay(
        [
            chunk("", usage=1),
            chunk("é", usage=2),
            chunk(" a", usage=3),
            chunk("", usage=4),
            chunk(" b", "length", usage=5),
            usage_only(5),
            DONE,
        ]
    )
    assert r.ok and r.first_token_source == "chunk"
    assert r.token_chunks == 5 and len(r.itl_s) == 4  # the final usage-only chunk is not a token
    assert r.completion_tokens == 5
    # the first token is the empty-text chunk, one chunk before the first text
    assert r.t_last_token - r.t_first_token == pytest.approx(sum(r.itl_s))
    assert len(r.text_parts) == 3 and r.itl_s[0] > 0


def test_vllm_chat_role_chunk_with_zero_usage_is_not_a_token():
    role = (
        b"data: "
        + json.dumps(
            {
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 0},
            }
        ).encode()
        + b"\n\n"
    )
    first = (
        b"data: "
        + json.dumps(
            {"choices": [{"index": 0, "delta": {"content": ""}}], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}
        ).encode()
        + b"\n\n"
    )
    last = (
        b"data: "
        + json.dumps(
            {
                "choices": [{"index": 0, "delta": {"content": "é"}, "finish_reason": "length"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2},
            }
        ).encode()
        + b"\n\n"
    )
    r, _ = replay([role, first, last, usage_only(2), DONE])
    assert r.ok and r.token_chunks == 2 and len(r.itl_s) == 1


def test_usage_only_at_the_end_is_not_a_token():
    r, _ = replay([chunk(" a"), chunk(" b"), chunk("", "length"), usage_only(2), DONE])
    assert r.ok and r.token_chunks == 2 and len(r.itl_s) == 1 and r.completion_tokens == 2


def test_logprobs_mark_a_token_whose_text_is_empty():
    r, _ = replay(
        [chunk("", logprobs={"tokens": ["bytes:\\xe2"], "token_logprobs": [-0.1]}), chunk("€", "length"), DONE]
    )
    assert r.ok and r.token_chunks == 2 and len(r.itl_s) == 1


def test_a_finished_stream_with_no_token_chunk_is_timed_at_its_finish():
    # Every chunk's text held back and no continuous usage: not dropped, timed at the finish (upper bound).
    r, t_sent = replay([chunk(""), chunk(""), chunk("", "length"), usage_only(3), DONE])
    assert r.ok and r.token_chunks == 0 and r.first_token_source == "end"
    assert r.t_first_token is not None and t_sent + GAP_S < r.t_first_token < r.t_done


def test_llama_cpp_interrupted_stream_is_cut_off():
    # llama_cpp.server with interrupt_requests: one empty chunk, then [DONE], no finish_reason.
    r, _ = replay([chunk(" a"), chunk(" b"), chunk(""), DONE])
    assert not r.ok and r.error_kind == "cut_off"
    assert r.error == "cut off by the server: [DONE] without a finish_reason after 2 token-carrying chunks (no usage)"
    assert r.t_first_token is not None  # mid-stream: its TTFT was measured


def test_transformers_serve_finish_without_done_is_ok():
    r, _ = replay([chunk(" a"), chunk(" b", "stop")])
    assert r.ok and r.error_kind is None and r.finish_reason == "stop"


@pytest.mark.parametrize(
    "parts,fixed,cut",
    [
        ([chunk(" a"), chunk(" b", "length"), DONE], 16, False),  # length: the server's own count
        ([chunk(" a", usage=1), chunk(" b", "stop", usage=2), usage_only(2), DONE], 16, True),
        ([chunk(" a"), chunk(" b", "stop"), DONE], 16, True),  # no usage: the finish says it
        ([chunk(" a"), chunk(" b", "stop"), DONE], None, False),  # the length was not fixed
    ],
)
def test_short_of_a_fixed_output_length(parts, fixed, cut):
    r, _ = replay(parts)
    why = short_of_fixed_length(r, fixed)
    assert (why is not None) == cut
    if cut:
        assert why.startswith("cut off by the server: finish_reason 'stop' after ") and "of 16 tokens" in why
