"""A test-only OpenAI-style streaming server, in a thread of the test, that can hold its stream back.

It decodes on a fixed schedule (first token after TTFT_S, then one every ITL_S) and reports that
schedule as its own inter-token-latency histogram under vLLM's name on /metrics, as vLLM does.
`mode` says how the client gets it:

- "paced": each chunk is written when it is decoded;
- "burst": every chunk is held back and written in one go when the stream is done: what a client
  that fell behind the server reads (issue 26: all its chunks back to back, after the fact).

It accepts vLLM's fields (ignore_eos, min_tokens), counts a prompt token per word (plus one), and
sends usage when stream_options asks for it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from rundir.ports import free_port

MODEL = "burst-model"
TTFT_S = 0.020
ITL_S = 0.010
BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)


class BurstServer:
    def __init__(self, mode: str = "paced"):
        assert mode in ("paced", "burst"), mode
        self.mode = mode
        self.itl_observed: list[float] = []  # the server's own inter-token latencies
        self._lock = threading.Lock()
        self.url = ""

    async def generate(self, request: Request) -> Response:
        body = await request.json()
        prompt = body.get("prompt", "")
        words = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        n = int(body.get("max_tokens") or 16)
        usage = {"prompt_tokens": words + 1, "completion_tokens": n, "total_tokens": words + 1 + n}
        if not body.get("stream"):
            return JSONResponse(
                {
                    "id": "x",
                    "object": "text_completion",
                    "model": MODEL,
                    "usage": usage,
                    "choices": [{"index": 0, "text": " w" * n, "finish_reason": "length"}],
                }
            )
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(self._stream(n, usage if with_usage else None), media_type="text/event-stream")

    async def _stream(self, n: int, usage: dict | None):
        t0 = time.monotonic()
        held: list[str] = []
        for k in range(n):
            delay = t0 + TTFT_S + k * ITL_S - time.monotonic()  # absolute times: no drift along the stream
            if delay > 0:
                await asyncio.sleep(delay)
            if k:
                with self._lock:
                    self.itl_observed.append(ITL_S)
            chunk = _sse({"choices": [{"index": 0, "text": " w", "finish_reason": "length" if k == n - 1 else None}]})
            if self.mode == "paced":
                yield chunk
            else:
                held.append(chunk)
        if usage:
            held.append(_sse({"choices": [], "usage": usage}))
        yield "".join(held) + "data: [DONE]\n\n"  # a burst: one write of everything held

    async def metrics(self, request: Request) -> Response:
        with self._lock:
            obs = list(self.itl_observed)
        name = "vllm:inter_token_latency_seconds"
        lines = [f"# HELP {name} Histogram of inter-token latency in seconds.", f"# TYPE {name} histogram"]
        for le in BUCKETS:
            lines.append(f'{name}_bucket{{le="{le}",model_name="{MODEL}"}} {sum(x <= le for x in obs)}')
        lines += [
            f'{name}_bucket{{le="+Inf",model_name="{MODEL}"}} {len(obs)}',
            f'{name}_count{{model_name="{MODEL}"}} {len(obs)}',
            f'{name}_sum{{model_name="{MODEL}"}} {sum(obs)}',
        ]
        return PlainTextResponse("\n".join(lines) + "\n")

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "test"}]})

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/completions", self.generate, methods=["POST"]),
                Route("/v1/models", self.models),
                Route("/metrics", self.metrics),
                Route("/health", lambda r: Response("ok")),
            ]
        )


def _sse(obj: dict) -> str:
    return "data: " + json.dumps(obj, separators=(",", ":")) + "\n\n"


class ServerThread:
    """The server on a free loopback port, served by uvicorn in a daemon thread."""

    def __init__(self, server: BurstServer):
        import uvicorn

        port = free_port()
        self.server = server
        server.url = f"http://127.0.0.1:{port}"
        self.uvicorn = uvicorn.Server(
            uvicorn.Config(server.app(), host="127.0.0.1", port=port, log_level="warning", access_log=False)
        )
        self.thread = threading.Thread(target=self.uvicorn.run, daemon=True)

    def __enter__(self) -> BurstServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.uvicorn.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the burst server did not start")
            time.sleep(0.02)
        return self.server

    def __exit__(self, *exc) -> None:
        self.uvicorn.should_exit = True
        self.thread.join(30)
