"""A test-only OpenAI-style streaming server whose timing is known exactly.

Every streamed request gets its first token X ms after it arrived and then one token every Y ms,
scheduled on absolute times (arrival + X + k*Y) so that the server's own overhead does not add
up along the stream; what the client measures above X and Y is the client's error (plus the
loopback hop). `max_tokens` tokens, then a usage chunk (when asked for) and `data: [DONE]`.

Failure modes, for the whole instance (--mode) or one request (body field "x_mode"):
  ok          the normal stream
  500         answer HTTP 500 with an OpenAI error body
  hang        accept the request and never answer
  stall       send the first token, then never send anything again
  close       send half the tokens, then drop the connection (no [DONE])
  error_chunk send one token, then an error object inside the stream, then [DONE]
  garbage     send one token, then a data line that is not JSON
--llama-cpp: streams as llama-cpp-python's server (llama_cpp.server) does: no usage whatever
stream_options asks, one chunk per token but text only in every third (the others empty), and,
its `interrupt_requests`, a running stream is cut when a newer request arrives: one empty chunk,
then `data: [DONE]`, no finish_reason.
--die-after K: the process exits (no goodbye) right after its K-th request has finished.
--freeze-at S --freeze-for D: from S seconds after the first request, for D seconds, no token is
sent to anyone (a frozen engine); tokens due meanwhile go out when it thaws.
--slow-fraction P --slow-ms S [--slow-kind independent|stall] [--seed N]: a known share P of requests
is slow (bench/exceedance_calibration.py): its first token comes no sooner than S ms after it arrived.
Two causes:
  independent  each request, by its own coin (P), is slow: slow requests are independent draws;
  stall        at each arrival, with probability P / w (w: requests waiting for their first token and
               not slow yet, this one included), the server stalls for S ms: every one of the w
               gets no first token until the stall ends. On average P slow requests per arrival, as
               above, but they come together (what a binomial count does not expect of closed loop).
               Requests that arrive during a stall are served as usual: the victims are exactly w.
With S above the TTFT bound, the slow requests are the ones over it; /health counts them (`slow`).

Run: python tests/loadgen/delay_server.py --port P --ttft-ms 50 --itl-ms 10 [--mode M] [--die-after K]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import sys
import time
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODES = ("ok", "500", "hang", "stall", "close", "error_chunk", "garbage")
SLOW_KINDS = ("independent", "stall")


class _DropConnection(Exception):
    """Raised inside the body iterator: uvicorn then closes the socket mid-response."""


class DelayServer:
    def __init__(
        self,
        ttft_ms: float,
        itl_ms: float,
        mode: str = "ok",
        die_after: int | None = None,
        freeze_at: float | None = None,
        freeze_for: float = 0.0,
        llama_cpp: bool = False,
        slow_fraction: float = 0.0,
        slow_ms: float = 1000.0,
        slow_kind: str = "independent",
        seed: int = 0,
    ):
        assert mode in MODES, mode
        assert slow_kind in SLOW_KINDS and 0.0 <= slow_fraction <= 1.0, (slow_kind, slow_fraction)
        self.slow_fraction, self.slow_s, self.slow_kind = slow_fraction, slow_ms / 1000.0, slow_kind
        self.rng = random.Random(seed)
        self.awaiting: dict[int, _Awaiting] = {}  # requests without their first token yet, by number
        self.slow = self.stalls = 0  # requests made slow; stalls started
        self.llama_cpp = llama_cpp
        self.newest = 0  # the newest request's number (llama_cpp: older running streams are cut)
        self.freeze_at, self.freeze_for = freeze_at, freeze_for
        self.t_first_request: float | None = None
        self.ttft_s, self.itl_s = ttft_ms / 1000.0, itl_ms / 1000.0
        self.mode, self.die_after = mode, die_after
        self.received = 0  # requests that reached a handler
        self.finished = 0  # streams that ended (any way)
        # What the server actually did (its own clock), to tell server overshoot from client error:
        self.ttft_done: list[float] = []  # first token written - request arrived
        self.tpot_done: list[float] = []  # (last token - first token) / (n - 1)

    async def completions(self, request: Request) -> Response:
        t_arrival = time.monotonic()
        self.received += 1
        if self.t_first_request is None:
            self.t_first_request = t_arrival
        body = await request.json()
        mode = body.get("x_mode", self.mode)
        chat = request.url.path.endswith("/chat/completions")
        if mode == "500":
            self._finish()
            return JSONResponse(
                {"error": {"message": "injected failure", "type": "server_error", "code": 500}}, status_code=500
            )
        if mode == "hang":
            await asyncio.sleep(3600)
        n = int(body.get("max_tokens") or 16)
        prompt = body.get("prompt", body.get("messages", ""))
        prompt_tokens = len(prompt) if isinstance(prompt, list) else max(1, len(str(prompt)) // 4)
        usage = bool((body.get("stream_options") or {}).get("include_usage")) and not self.llama_cpp
        if not body.get("stream"):
            self._finish()
            return JSONResponse({"error": {"message": "this test server only streams"}}, status_code=400)
        return StreamingResponse(
            self._stream(t_arrival, n, mode, chat, prompt_tokens, usage), media_type="text/event-stream"
        )

    async def _stream(self, t_arrival: float, n: int, mode: str, chat: bool, prompt_tokens: int, usage: bool):
        self.newest += 1
        me = self.newest
        first = self.awaiting[me] = _Awaiting(t_arrival + self.ttft_s)
        self._maybe_slow(me)
        try:
            if chat:  # a role-only first chunk, as OpenAI and vLLM send it: it carries no token
                yield _sse(_chat_chunk({"role": "assistant", "content": ""}))
            t_first = t_last = None
            for k in range(n):
                while time.monotonic() < first.due:  # a stall may push it while we sleep
                    await _sleep_until(first.due)
                await _sleep_until(first.due + k * self.itl_s)
                await self._thawed()
                if mode == "stall" and k == 1:
                    await asyncio.sleep(3600)
                if mode == "close" and k == n // 2:
                    raise _DropConnection()
                if mode == "error_chunk" and k == 1:
                    yield _sse({"error": {"message": "injected in-stream error", "type": "server_error"}})
                    yield "data: [DONE]\n\n"
                    return
                if mode == "garbage" and k == 1:
                    yield "data: {not json\n\n"
                    yield "data: [DONE]\n\n"
                    return
                if self.llama_cpp and self.newest != me:  # interrupt_requests: a newer request won
                    yield _sse(_chat_chunk({}) if chat else _text_chunk(""))
                    yield "data: [DONE]\n\n"
                    return
                text = f" t{k}" if not self.llama_cpp or k % 3 == 2 or k == n - 1 else ""
                self.awaiting.pop(me, None)  # before the send: a stall from now on cannot make it slow
                yield _sse(_chat_chunk({"content": text}) if chat else _text_chunk(text))
                t_last = time.monotonic()
                t_first = t_first or t_last
            if t_first is not None:
                self.ttft_done.append(t_first - t_arrival)
            if n > 1:
                self.tpot_done.append((t_last - t_first) / (n - 1))
            yield _sse(_chat_chunk({}, "length") if chat else _text_chunk("", "length"))
            if usage:
                yield _sse(
                    {
                        "id": "x",
                        "object": "text_completion",
                        "choices": [],
                        "usage": {
                            "prompt_tokens": prompt_tokens,
                            "completion_tokens": n,
                            "total_tokens": prompt_tokens + n,
                        },
                    }
                )
            yield "data: [DONE]\n\n"
        finally:
            self.awaiting.pop(me, None)
            self._finish()

    def _maybe_slow(self, me: int) -> None:
        """--slow-fraction: make this request slow (independent) or stall every waiting one (see the top)."""
        if self.slow_fraction <= 0.0:
            return
        if self.slow_kind == "independent":
            victims = [me] if self.rng.random() < self.slow_fraction else []
        else:
            fresh = [k for k, a in self.awaiting.items() if not a.slow]  # this one included
            victims = fresh if self.rng.random() < self.slow_fraction / len(fresh) else []
            self.stalls += bool(victims)
        until = time.monotonic() + self.slow_s
        for k in victims:
            self.awaiting[k].due, self.awaiting[k].slow = max(self.awaiting[k].due, until), True
        self.slow += len(victims)

    async def _thawed(self) -> None:
        if self.freeze_at is None or self.t_first_request is None:
            return
        start = self.t_first_request + self.freeze_at
        if start <= time.monotonic() < start + self.freeze_for:
            await _sleep_until(start + self.freeze_for)

    def _finish(self) -> None:
        self.finished += 1
        if self.die_after is not None and self.finished >= self.die_after:
            # Die the hard way (no graceful shutdown), the way a crashed engine does.
            asyncio.get_running_loop().call_later(0.01, os._exit, 3)

    async def health(self, request: Request) -> Response:
        return JSONResponse(
            {
                "received": self.received,
                "finished": self.finished,
                "slow": self.slow,
                "stalls": self.stalls,
                "ttft_p50": _median(self.ttft_done),
                "tpot_p50": _median(self.tpot_done),
            }
        )

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/completions", self.completions, methods=["POST"]),
                Route("/v1/chat/completions", self.completions, methods=["POST"]),
                Route("/health", self.health, methods=["GET"]),
            ]
        )


@dataclass
class _Awaiting:
    due: float  # monotonic time the first token is due
    slow: bool = False


def _median(xs: list[float]) -> float | None:
    return sorted(xs)[len(xs) // 2] if xs else None


async def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


def _text_chunk(text: str, finish: str | None = None) -> dict:
    return {"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": text, "finish_reason": finish}]}


def _chat_chunk(delta: dict, finish: str | None = None) -> dict:
    return {
        "id": "x",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


class _QuietDrops(logging.Filter):
    """uvicorn logs a traceback for every stream we drop on purpose; keep the log for real errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not _is_drop(exc)


def _is_drop(exc: BaseException | None) -> bool:
    if exc is None:
        return False
    if isinstance(exc, _DropConnection):
        return True
    return any(_is_drop(e) for e in getattr(exc, "exceptions", ()))  # anyio wraps it in an ExceptionGroup


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--mode", choices=MODES, default="ok")
    p.add_argument("--die-after", type=int, default=None)
    p.add_argument("--freeze-at", type=float, default=None)
    p.add_argument("--freeze-for", type=float, default=0.0)
    p.add_argument("--llama-cpp", action="store_true")
    p.add_argument("--slow-fraction", type=float, default=0.0)
    p.add_argument("--slow-ms", type=float, default=1000.0)
    p.add_argument("--slow-kind", choices=SLOW_KINDS, default="independent")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    server = DelayServer(
        a.ttft_ms,
        a.itl_ms,
        a.mode,
        a.die_after,
        a.freeze_at,
        a.freeze_for,
        a.llama_cpp,
        a.slow_fraction,
        a.slow_ms,
        a.slow_kind,
        a.seed,
    )
    logging.getLogger("uvicorn.error").addFilter(_QuietDrops())
    uvicorn.run(
        server.app(),
        host="127.0.0.1",
        port=a.port,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=30,
        backlog=4096,
    )


if __name__ == "__main__":
    sys.exit(main())
