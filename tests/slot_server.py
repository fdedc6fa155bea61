"""A test-only OpenAI-style server with a fixed number of slots, whose capacity is known by construction.

`--slots S` requests are served at once; more wait in a FIFO queue for a free slot. A served
request gets its first token `--prefill-ms` after it took its slot, then one token every
`--itl-ms`, so it holds the slot for T = prefill + (max_tokens - 1) * itl. Hence, under a TTFT
SLO between prefill and prefill + T:

- closed loop: concurrency <= S never waits (TTFT = prefill); concurrency S + 1 keeps one request
  waiting at all times (mean wait T / S), so the highest concurrency within the SLO is S;
- open loop with regular arrivals: below S / T requests/s nobody waits; above it the queue grows
  without bound (the over-saturation rule's runaway level), so the capacity is S / T.

Prompt tokens are counted as words + 1 (a BOS), usage is sent when stream_options asks for it;
/v1/models lists `slot-model`; /health reports the most requests that were ever waiting.

Run: python tests/slot_server.py --port P --slots 3 --prefill-ms 30 --itl-ms 25
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "slot-model"


class SlotServer:
    def __init__(self, slots: int, prefill_ms: float, itl_ms: float):
        self.slots = asyncio.Semaphore(slots)  # FIFO: asyncio wakes waiters in order
        self.prefill_s, self.itl_s = prefill_ms / 1000.0, itl_ms / 1000.0
        self.waiting = self.max_waiting = self.served = 0
        self.prompts: list[str] = []  # every prompt, in arrival order (trace tests read them)
        self.arrivals: list[float] = []  # epoch seconds

    async def generate(self, request: Request) -> Response:
        body = await request.json()
        self.arrivals.append(time.time())
        chat = request.url.path.endswith("/chat/completions")
        text = (
            "\n".join(m.get("content", "") for m in body.get("messages", [])) if chat else str(body.get("prompt", ""))
        )
        self.prompts.append(text)
        n = max(1, int(body.get("max_tokens") or 16))
        usage = {
            "prompt_tokens": len(text.split()) + 1,
            "completion_tokens": n,
            "total_tokens": len(text.split()) + 1 + n,
        }
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if not body.get("stream"):
            await asyncio.sleep(self.prefill_s)
            return JSONResponse(
                {
                    "id": "x",
                    "object": "text_completion",
                    "model": MODEL,
                    "usage": usage,
                    "choices": [{"index": 0, "text": " w" * n, "finish_reason": "length"}],
                }
            )
        return StreamingResponse(self._stream(n, chat, usage if with_usage else None), media_type="text/event-stream")

    async def _stream(self, n: int, chat: bool, usage: dict | None):
        self.waiting += 1
        self.max_waiting = max(self.max_waiting, self.waiting)
        async with self.slots:
            self.waiting -= 1
            t0 = time.monotonic()
            for k in range(n):
                delay = t0 + self.prefill_s + k * self.itl_s - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                piece = {"delta": {"content": " w"}} if chat else {"text": " w"}
                yield (
                    "data: "
                    + json.dumps(
                        {"choices": [{"index": 0, **piece, "finish_reason": "length" if k == n - 1 else None}]}
                    )
                    + "\n\n"
                )
            self.served += 1
        if usage:
            yield "data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n"
        yield "data: [DONE]\n\n"

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "test"}]})

    async def health(self, request: Request) -> Response:
        return JSONResponse({"served": self.served, "waiting": self.waiting, "max_waiting": self.max_waiting})

    async def seen(self, request: Request) -> Response:
        return JSONResponse({"prompts": self.prompts, "arrivals": self.arrivals})


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--slots", type=int, default=3)
    ap.add_argument("--prefill-ms", type=float, default=30.0)
    ap.add_argument("--itl-ms", type=float, default=25.0)
    a = ap.parse_args(argv)
    s = SlotServer(a.slots, a.prefill_ms, a.itl_ms)
    app = Starlette(
        routes=[
            Route("/v1/completions", s.generate, methods=["POST"]),
            Route("/v1/chat/completions", s.generate, methods=["POST"]),
            Route("/v1/models", s.models),
            Route("/health", s.health),
            Route("/seen", s.seen),
        ]
    )
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning", access_log=False, backlog=4096)


if __name__ == "__main__":
    main()
