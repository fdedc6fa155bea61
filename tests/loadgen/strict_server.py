"""A test-only OpenAI-style server as strict as most servers that are not vLLM.

- prompts must be strings (a list of token ids: HTTP 400 "prompt must be a string");
- fields outside the core OpenAI API are refused (HTTP 422 "Unexpected fields in the request:
  {...}", transformers serve's wording), so ignore_eos and min_tokens are;
- its own token counting rule, unlike any client tokenizer: a token is a run of letters or a
  single other non-space character, plus 1 (BOS) for completions and 7 (a chat template) for chat;
- it stops early at "EOS" (after `--eos-after` tokens) since ignore_eos is not a thing here;
- `--refuse-all MESSAGE`: every generation request gets HTTP 400 with that message;
  `--refuse-after K`: only after the first K requests (the preflight passes, the sweep fails).

Both /v1/completions and /v1/chat/completions stream SSE with usage when stream_options asks;
/v1/models lists one model, `strict-model`.

Run: python tests/loadgen/strict_server.py --port P [--eos-after N] [--refuse-all MSG]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "strict-model"
KNOWN = {
    "model",
    "prompt",
    "messages",
    "max_tokens",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "n",
    "stop",
    "seed",
    "user",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
    "echo",
    "suffix",
}
_TOKEN = re.compile(r"[A-Za-z]+|[^\sA-Za-z]")


def count_tokens(text: str, chat: bool) -> int:
    return len(_TOKEN.findall(text)) + (7 if chat else 1)


class StrictServer:
    def __init__(self, eos_after: int | None, refuse_all: str | None, refuse_after: int = 0):
        self.eos_after, self.refuse_all, self.refuse_after = eos_after, refuse_all, refuse_after
        self.requests = 0

    async def generate(self, request: Request) -> Response:
        self.requests += 1
        chat = request.url.path.endswith("/chat/completions")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the body is not JSON")
        if self.refuse_all and self.requests > self.refuse_after:
            return _error(400, self.refuse_all)
        unknown = set(body) - KNOWN
        if unknown:
            return _error(422, f"Unexpected fields in the request: {unknown}")
        if body.get("model") != MODEL:
            return _error(404, f"The model `{body.get('model')}` does not exist.")
        if chat:
            msgs = body.get("messages")
            if not isinstance(msgs, list) or not all(
                isinstance(m, dict) and isinstance(m.get("content"), str) for m in msgs
            ):
                return _error(400, "messages must be a list of {role, content: string}")
            text = "\n".join(m["content"] for m in msgs)
        else:
            if not isinstance(body.get("prompt"), str):
                return _error(400, "prompt must be a string")
            text = body["prompt"]
        prompt_tokens = count_tokens(text, chat)
        max_tokens = int(body.get("max_tokens") or 16)
        n = min(max_tokens, self.eos_after) if self.eos_after else max_tokens
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
        if not body.get("stream"):
            choice = (
                {"index": 0, "message": {"role": "assistant", "content": " w" * n}}
                if chat
                else {"index": 0, "text": " w" * n}
            )
            return JSONResponse(
                {
                    "id": "x",
                    "object": "chat.completion" if chat else "text_completion",
                    "model": MODEL,
                    "choices": [{**choice, "finish_reason": "stop"}],
                    "usage": usage,
                }
            )
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(
            _stream(n, chat, usage if with_usage else None, n < max_tokens), media_type="text/event-stream"
        )

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "test"}]})


async def _stream(n: int, chat: bool, usage: dict | None, stopped: bool):
    for i in range(n):
        await asyncio.sleep(0.002)
        delta = {"delta": {"content": " w"}} if chat else {"text": " w"}
        last = i == n - 1
        yield (
            "data: "
            + json.dumps(
                {
                    "choices": [
                        {"index": 0, **delta, "finish_reason": ("stop" if stopped else "length") if last else None}
                    ]
                }
            )
            + "\n\n"
        )
    if usage:
        yield "data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n"
    yield "data: [DONE]\n\n"


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error"}}, status_code=status)


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--eos-after", type=int, default=None)
    ap.add_argument("--refuse-all", default=None)
    ap.add_argument("--refuse-after", type=int, default=0)
    a = ap.parse_args(argv)
    s = StrictServer(a.eos_after, a.refuse_all, a.refuse_after)
    app = Starlette(
        routes=[
            Route("/v1/completions", s.generate, methods=["POST"]),
            Route("/v1/chat/completions", s.generate, methods=["POST"]),
            Route("/v1/models", s.models),
            Route("/health", lambda r: Response("ok")),
        ]
    )
    print(f"strict server on 127.0.0.1:{a.port}", file=sys.stderr, flush=True)
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
