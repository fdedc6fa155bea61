"""OpenAI shapes for /v1/completions and /v1/chat/completions: the error body, the parsed
request, the response and stream chunks. Parsing and checking requests is validation.py's job.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from refengine.sampling_params import SamplingParams


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        # A message may echo the client's input: keep it encodable (no lone surrogates) and short.
        message = self.message.encode("utf-8", "backslashreplace").decode("utf-8")
        if len(message) > 2000:
            message = message[:1997] + "..."
        return {"error": {"message": message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass
class GenerationRequest:
    chat: bool
    model: str | None
    prompt: str | list[int]
    params: SamplingParams
    stream: bool
    include_usage: bool
    priority: int


def plain_chat_prompt(messages: list[dict]) -> str:
    """The documented fallback for models without a chat template: 'role: content' lines, then 'assistant:'."""
    lines = [f"{m['role']}: {m.get('content') or ''}" for m in messages]
    return "\n".join(lines) + "\nassistant:"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chunk(
    req: GenerationRequest,
    request_id: str,
    model: str,
    text: str,
    finish_reason: str | None,
    first: bool,
    created: int | None = None,
) -> dict:
    created = created or int(time.time())
    if req.chat:
        delta = {"content": text}
        if first:
            delta = {"role": "assistant", "content": text}
        return {
            "id": request_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}],
    }


def usage_chunk(
    req: GenerationRequest, request_id: str, model: str, prompt_tokens: int, completion_tokens: int
) -> dict:
    obj = "chat.completion.chunk" if req.chat else "text_completion"
    return {
        "id": request_id,
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "choices": [],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def full_response(
    req: GenerationRequest,
    request_id: str,
    model: str,
    text: str,
    finish_reason: str | None,
    prompt_tokens: int,
    completion_tokens: int,
) -> dict:
    if req.chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    return {
        "id": request_id,
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(prompt_tokens, completion_tokens),
    }
