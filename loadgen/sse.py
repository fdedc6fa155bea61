"""Reading an OpenAI streaming response (server-sent events), independent of any HTTP client.

`read_sse_stream(readline, clock)` pulls lines until `data: [DONE]` and timestamps each one the
moment readline returns it, so the caller must hand over lines as they arrive (locust's
FastHttpUser: `resp._response.readline(b"\\n")`; `iter_content` buffers and would move first-token
times late). Definitions (docs/metrics.md):

- a chunk carries a token when a choice has non-empty completions `text`, or a chat `delta` with
  non-empty `content` (or reasoning / tool-call content), or non-empty `token_ids`, or `logprobs`
  with entries (`content` or `tokens`), or when the stream's usage is continuous (vLLM's
  `continuous_usage_stats`: the first chunk with choices already carries usage) and the chunk's
  `usage.completion_tokens` went up. The last is why continuous usage is asked for: vLLM sends a
  token whose text is an incomplete UTF-8 character as an empty-text chunk, and only its usage
  says a token came. A role-only or finish-only chunk does not count;
- t_first_token is the time of the first such chunk (`first_token_source` "chunk"); each gap
  between consecutive ones is an ITL. A stream that finished with no such chunk (every token's
  text held back, no continuous usage) gets the time of the first chunk that shows a token was
  made, its finish_reason or usage, an upper bound (`first_token_source` "end") rather than no TTFT;
- the number of such chunks is kept (`token_chunks`) but is not a token count: a server may pack
  several tokens in one chunk, or send a token in a chunk with no text (docs/metrics.md);
- server usage is taken from the last chunk that has a `usage` object.

End: `data: [DONE]`, or the response ending cleanly after a choice's finish_reason (transformers
serve and some gateways send no [DONE]). A [DONE] with no finish_reason before it is a stream the
server cut off (llama-cpp-python's server does this to a running stream when a new request
arrives, `interrupt_requests`): error kind cut_off, not a success.

Errors: a data line that is not JSON -> bad_payload; an error object inside the stream, or the
stream ending (or the connection failing) before [DONE] and before any finish_reason ->
stream_broken; a TimeoutError out of readline -> timeout; [DONE] with no finish_reason -> cut_off
(`short_of_fixed_length` adds the request's side: fewer tokens than a fixed output length asked
for). The first problem in stream order decides. Anything that is not an Exception (a greenlet
being killed) propagates; the caller can then digest() what had arrived.

Why two phases: while a stream is read, each line is only timestamped and kept; the JSON is
parsed after the stream ends. A server that emits a token for every sequence of a batch at once
wakes many readers at the same moment; each reader's timestamp waits for the readers served
before it, so the work done between a line's arrival and the next readline is kept minimal.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Callable

MAX_ERROR_CHARS = 500


@dataclass
class StreamResult:
    t_first_token: float | None = None
    t_last_token: float | None = None
    t_done: float | None = None  # when [DONE] arrived, or when the stream failed
    token_chunks: int = 0  # chunks that carried generated output (not a token count)
    first_token_source: str | None = None  # chunk | end (module docstring)
    text_parts: list[str] = field(default_factory=list)  # the streamed output text, for the client tokenizer
    itl_s: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None  # server usage
    completion_tokens: int | None = None
    finish_reason: str | None = None
    saw_done: bool = False
    ended_without_done: bool = False  # the response ended cleanly, no [DONE] (judged in digest)
    error_kind: str | None = None  # None when the stream completed
    error: str | None = None
    pending: list[tuple[float, bytes]] = field(default_factory=list)  # (arrival, data payload), not yet parsed
    t_made: float | None = None  # first chunk with a finish_reason or usage tokens > 0
    _usage_out: int = 0  # completion_tokens of the last usage seen (continuous usage)
    _continuous: bool | None = None  # does the stream carry usage in every chunk? (first choice chunk)

    @property
    def ok(self) -> bool:
        return self.error_kind is None and self.saw_done

    def digest(self) -> "StreamResult":
        """Parse the pending data lines in order. The first error in the stream wins over a later one."""
        pending, self.pending = self.pending, []
        for t, payload in pending:
            problem = _take_payload(self, t, payload)
            if problem is not None:
                self.saw_done = False
                _fail(self, t, *problem, force=True)
                break
        if self.ended_without_done and self.error_kind is None:
            self.ended_without_done = False
            if self.finish_reason:  # finished, just without the [DONE] sentinel
                self.saw_done = True
            else:
                _fail(self, self.t_done or time.time(), "stream_broken", "stream ended without data: [DONE]")
        if self.saw_done and self.error_kind is None and not self.finish_reason:
            _fail(
                self,
                self.t_done or time.time(),
                "cut_off",
                f"cut off by the server: [DONE] without a finish_reason after {self._tokens_words()}",
            )
        if self.ok and self.t_first_token is None:
            # Finished, but no chunk showed when a token came: the first chunk that shows one was
            # made bounds it from above; a TTFT from it is late, never early (module docstring).
            self.t_first_token = self.t_last_token = self.t_made if self.t_made is not None else self.t_done
            self.first_token_source = "end"
        return self

    def _tokens_words(self) -> str:
        if self.completion_tokens is not None:
            return f"{self.completion_tokens} tokens"
        return f"{self.token_chunks} token-carrying chunks (no usage)"


def short_of_fixed_length(r: StreamResult, fixed_len: int | None) -> str | None:
    """Why a finished stream is cut_off from the request's side: it asked for exactly `fixed_len`
    tokens (ignore_eos, or min_tokens = max_tokens) and the server finished other than by `length`
    with fewer, by its usage or, with no usage, by the finish itself (only `length` means it got
    to max_tokens). None: not cut off, or the request did not fix its length."""
    if fixed_len is None or not r.ok or r.finish_reason == "length":
        return None
    if r.completion_tokens is not None and r.completion_tokens >= fixed_len:
        return None
    got = (
        f"{r.completion_tokens} of {fixed_len} tokens"
        if r.completion_tokens is not None
        else f"{r.token_chunks} token-carrying chunks (no usage) of {fixed_len} tokens"
    )
    return (
        f"cut off by the server: finish_reason {r.finish_reason!r} after {got}, though the request "
        "fixed the output length"
    )


def read_sse_stream(
    readline: Callable[[], bytes], clock: Callable[[], float] = time.time, result: StreamResult | None = None
) -> StreamResult:
    """Read to [DONE], the end of the stream or a failure, then digest. Fills `result` in place when
    given, so that a caller whose read is cut off still has the lines that had arrived."""
    r = result if result is not None else StreamResult()
    pending = r.pending
    while True:
        try:
            raw = readline()
        except TimeoutError as exc:
            _fail(r, clock(), "timeout", f"deadline passed while streaming: {exc or type(exc).__name__}")
            break
        except Exception as exc:  # noqa: BLE001 - reset, cut chunked body, parser error: a failed request
            _fail(r, clock(), "stream_broken", f"{type(exc).__name__}: {exc}")
            break
        now = clock()
        if not raw:
            r.t_done, r.ended_without_done = now, True
            break
        if raw.startswith(b"data:"):
            payload = raw[5:].strip()
            if payload == b"[DONE]":
                r.saw_done, r.t_done = True, now
                break
            pending.append((now, payload))
        elif raw.lstrip().startswith(b"{"):
            _fail(r, now, "bad_payload", "response is not an SSE stream: " + _snippet(raw.rstrip()))
            break
        # else: an empty line (event separator), a comment (": keep-alive") or an event:/id:/retry:
        # field, none of which carries anything we use
    return r.digest()


def _take_payload(r: StreamResult, now: float, payload: bytes) -> tuple[str, str] | None:
    """Account one data line; returns (error_kind, message) when the line is a problem."""
    try:
        obj = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "bad_payload", "data line is not JSON: " + _snippet(payload)
    if not isinstance(obj, dict):
        return "bad_payload", "data line is not a JSON object: " + _snippet(payload)
    err = _error_message(obj)
    if err is not None:
        return "stream_broken", "error inside the stream: " + err
    choices = [c for c in obj.get("choices") or () if isinstance(c, dict)]
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
    if choices and r._continuous is None:
        # Continuous usage shows in the first chunk with choices; usage only at the end (the usual
        # include_usage) must not turn its final chunk into a token.
        r._continuous = usage is not None
    carries = False
    for choice in choices:
        carries = carries or _carries_token(choice)
        _collect_text(r.text_parts, choice)
        if choice.get("finish_reason"):
            r.finish_reason = choice["finish_reason"]
            r.t_made = now if r.t_made is None else r.t_made
    if usage is not None:
        r.prompt_tokens = usage.get("prompt_tokens", r.prompt_tokens)
        r.completion_tokens = usage.get("completion_tokens", r.completion_tokens)
        out = usage.get("completion_tokens")
        if isinstance(out, int) and out > 0:
            r.t_made = now if r.t_made is None else r.t_made
            if r._continuous and out > r._usage_out:
                carries = True
            r._usage_out = max(r._usage_out, out)
    if carries:
        if r.t_first_token is None:
            r.t_first_token, r.first_token_source = now, "chunk"
        else:
            assert r.t_last_token is not None, "set with the first token"
            r.itl_s.append(now - r.t_last_token)
        r.t_last_token = now
        r.token_chunks += 1
    return None


def _carries_token(choice: dict) -> bool:
    if choice.get("text") or choice.get("token_ids"):
        return True
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and (logprobs.get("content") or logprobs.get("tokens")):
        return True  # one entry per token, even when its text is empty
    delta = choice.get("delta")
    if isinstance(delta, dict):
        return bool(
            delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls")
        )
    return False


def _collect_text(parts: list[str], choice: dict) -> None:
    text = choice.get("text")
    if isinstance(text, str) and text:
        parts.append(text)
    delta = choice.get("delta")
    if isinstance(delta, dict):
        for key in ("reasoning_content", "reasoning", "content"):
            if isinstance(delta.get(key), str) and delta[key]:
                parts.append(delta[key])


def _error_message(obj: dict) -> str | None:
    err = obj.get("error")
    if err:
        if isinstance(err, dict):
            return str(err.get("message") or err)[:MAX_ERROR_CHARS]
        return str(err)[:MAX_ERROR_CHARS]
    if obj.get("object") == "error":  # vLLM's ErrorResponse shape
        return str(obj.get("message") or obj)[:MAX_ERROR_CHARS]
    return None


def _fail(r: StreamResult, now: float, kind: str, message: str, force: bool = False) -> None:
    if r.error_kind is None or force:
        r.t_done = now
        r.error_kind, r.error = kind, message[:MAX_ERROR_CHARS]


def _snippet(b: bytes, n: int = 120) -> str:
    return repr(b[:n])[2:-1]
