"""The SSE reader on byte strings: token-carrying chunks, timings, usage and the error classes."""

from __future__ import annotations

import errno
import json

import pytest

from loadgen.errors import RequestDeadline, classify_request_error, is_refused
from loadgen.sse import read_sse_stream


def feed(lines: list[bytes], times: list[float] | None = None, then: BaseException | None = None):
    """readline() over `lines`; clock() returns the time of the line last read."""
    it = iter(lines)
    times = times if times is not None else [float(i) for i in range(len(lines))]
    state = {"i": -1}

    def readline() -> bytes:
        try:
            line = next(it)
        except StopIteration:
            if then is not None:
                raise then from None
            return b""
        state["i"] += 1
        return line

    def clock() -> float:
        return times[min(max(state["i"], 0), len(times) - 1)] if times else 0.0

    return readline, clock


def data(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n"


def text(t: str, finish=None) -> bytes:
    return data({"choices": [{"index": 0, "text": t, "finish_reason": finish}]})


def delta(d: dict) -> bytes:
    return data({"choices": [{"index": 0, "delta": d, "finish_reason": None}]})


def finish(reason: str) -> bytes:
    return data({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})


USAGE = data({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}})


def test_completions_stream():
    lines = [text("a"), b"\n", text("b"), b"\n", text(""), text("c", "length"), USAGE, b"data: [DONE]\n", b"\n"]
    times = [1.0, 1.0, 1.5, 1.5, 1.7, 2.25, 2.3, 2.4, 2.4]
    r = read_sse_stream(*feed(lines, times))
    assert r.ok and r.saw_done and r.error_kind is None
    assert r.t_first_token == 1.0 and r.t_last_token == 2.25 and r.t_done == 2.4
    assert r.token_chunks == 3  # the empty-text chunk carries no token
    assert r.itl_s == pytest.approx([0.5, 0.75])
    assert (r.prompt_tokens, r.completion_tokens) == (7, 3)
    assert r.finish_reason == "length"


def test_chat_role_only_chunk_is_not_a_token():
    lines = [
        delta({"role": "assistant", "content": ""}),
        delta({"role": "assistant"}),
        delta({"content": "Hi"}),
        delta({"content": " there"}),
        finish("stop"),
        b"data: [DONE]\n",
    ]
    r = read_sse_stream(*feed(lines, [0.1, 0.2, 0.5, 0.6, 0.7, 0.8]))
    assert r.ok and r.t_first_token == 0.5 and r.token_chunks == 2 and r.itl_s == pytest.approx([0.1])
    assert r.prompt_tokens is None  # no usage chunk: unknown, not zero


def test_reasoning_and_token_ids_count_as_tokens():
    lines = [
        delta({"reasoning_content": "hmm"}),
        data({"choices": [{"index": 0, "text": "", "token_ids": [5]}]}),
        b"data: [DONE]\n",
    ]
    assert read_sse_stream(*feed(lines)).token_chunks == 2


def test_comments_and_other_fields_are_skipped_and_crlf_is_fine():
    lines = [
        b": keep-alive\r\n",
        b"event: message\r\n",
        b"id: 3\r\n",
        b"data:" + json.dumps({"choices": [{"text": "x", "finish_reason": "length"}]}).encode() + b"\r\n",
        b"\r\n",
        b"data:[DONE]\r\n",
    ]
    r = read_sse_stream(*feed(lines))
    assert r.ok and r.token_chunks == 1


def test_stream_ending_without_done_is_broken():
    r = read_sse_stream(*feed([text("a"), text("b")], [1.0, 2.0]))
    assert r.error_kind == "stream_broken" and "[DONE]" in r.error and not r.ok
    assert r.token_chunks == 2 and r.t_first_token == 1.0  # what arrived is kept


def test_connection_failure_mid_stream_is_broken():
    r = read_sse_stream(*feed([text("a")], then=ConnectionResetError(errno.ECONNRESET, "reset")))
    assert r.error_kind == "stream_broken" and "ConnectionResetError" in r.error


def test_error_object_inside_the_stream_is_broken():
    for err in (
        {"error": {"message": "engine died", "type": "server_error"}},
        {"object": "error", "message": "vllm style", "type": "BadRequestError", "code": 400},
    ):
        r = read_sse_stream(*feed([text("a"), data(err), b"data: [DONE]\n"]))
        assert r.error_kind == "stream_broken" and ("engine died" in r.error or "vllm style" in r.error)


def test_non_json_data_is_bad_payload():
    r = read_sse_stream(*feed([text("a"), b"data: {not json\n", b"data: [DONE]\n"]))
    assert r.error_kind == "bad_payload" and "not JSON" in r.error
    r = read_sse_stream(*feed([b'{"id": "plain json body, not SSE"}\n']))
    assert r.error_kind == "bad_payload"
    r = read_sse_stream(*feed([b"data: [1, 2]\n"]))
    assert r.error_kind == "bad_payload"


def test_first_problem_in_stream_order_decides():
    # an error object, then the connection drops: the error object is the story
    r = read_sse_stream(
        *feed(
            [text("a"), data({"error": {"message": "oom"}}), text("b")],
            [1.0, 2.0, 3.0],
            then=ConnectionResetError("reset"),
        )
    )
    assert r.error_kind == "stream_broken" and "oom" in r.error and r.t_done == 2.0 and r.token_chunks == 1
    r = read_sse_stream(*feed([b"data: nope\n", text("a")], then=RequestDeadline("late")))
    assert r.error_kind == "bad_payload" and r.token_chunks == 0


def test_timeout_while_reading():
    r = read_sse_stream(*feed([text("a")], then=RequestDeadline("deadline")))
    assert r.error_kind == "timeout" and r.token_chunks == 1


def test_killed_greenlet_propagates_and_partial_result_is_kept():
    class Killed(BaseException):
        pass

    from loadgen.sse import StreamResult

    partial = StreamResult()
    with pytest.raises(Killed):
        read_sse_stream(*feed([text("a"), text("b")], [1.0, 1.25], then=Killed()), result=partial)
    partial.digest()
    assert partial.token_chunks == 2 and partial.itl_s == pytest.approx([0.25])


def test_classify_request_errors():
    class RetriesExceeded(Exception):  # geventhttpclient wraps the cause in .original
        def __init__(self, original):
            self.original = original

    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    assert classify_request_error(refused)[0] == "connect" and is_refused(refused)
    assert is_refused(RetriesExceeded(refused))
    assert classify_request_error(RetriesExceeded(RequestDeadline("x")))[0] == "timeout"
    assert classify_request_error(TimeoutError())[0] == "timeout"
    reset = ConnectionResetError(errno.ECONNRESET, "reset")
    assert classify_request_error(reset)[0] == "connect" and not is_refused(reset)
