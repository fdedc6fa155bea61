"""OpenAI request parsing and response shapes for /v1/completions and /v1/chat/completions.

Unknown fields are ignored (clients send vendor extras; other servers reject `ignore_eos`, ours
must not). Known fields of the wrong type get a 400 that names the field.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from refengine.errors import RefEngineError
from refengine.sampling_params import SamplingParams


class ApiError(Exception):
    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass
class GenerationRequest:
    chat: bool
    model: str | None
    prompt: str | list[int]
    params: SamplingParams
    stream: bool
    include_usage: bool
    priority: int


_MISSING = object()


def _field(body: dict, name: str, types, default=None, allow_none: bool = True):
    value = body.get(name, _MISSING)
    if value is _MISSING or (value is None and allow_none):
        return default
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise ApiError(400, f"'{name}' must be {_type_names(types)}, got a boolean", param=name)
    if not isinstance(value, types):
        raise ApiError(400, f"'{name}' must be {_type_names(types)}, got {type(value).__name__}", param=name)
    return value


def _type_names(types) -> str:
    types = types if isinstance(types, tuple) else (types,)
    names = {int: "an integer", float: "a number", str: "a string", bool: "a boolean", list: "a list", dict: "an object"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def _sampling_params(body: dict, default_max_tokens: int | None, max_tokens_field: str = "max_tokens") -> SamplingParams:
    max_tokens = _field(body, max_tokens_field, int, _field(body, "max_tokens", int, default_max_tokens))
    stop = _field(body, "stop", (str, list), None)
    if isinstance(stop, list) and not all(isinstance(s, str) for s in stop):
        raise ApiError(400, "'stop' must be a string or a list of strings", param="stop")
    stop_token_ids = _field(body, "stop_token_ids", list, None)
    if stop_token_ids is not None and not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_token_ids):
        raise ApiError(400, "'stop_token_ids' must be a list of integers", param="stop_token_ids")
    try:
        return SamplingParams(
            n=_field(body, "n", int, 1), temperature=float(_field(body, "temperature", (int, float), 1.0)),
            top_p=float(_field(body, "top_p", (int, float), 1.0)), top_k=_field(body, "top_k", int, 0),
            seed=_field(body, "seed", int, None), max_tokens=max_tokens,
            min_tokens=_field(body, "min_tokens", int, 0), stop=stop, stop_token_ids=stop_token_ids,
            ignore_eos=_field(body, "ignore_eos", bool, False))
    except RefEngineError as exc:
        raise ApiError(400, str(exc)) from None


def _stream_options(body: dict) -> tuple[bool, bool]:
    stream = _field(body, "stream", bool, False)
    options = _field(body, "stream_options", dict, {}) or {}
    include_usage = bool(options.get("include_usage", False))
    return stream, include_usage


def _prompt(body: dict) -> str | list[int]:
    if "prompt" not in body or body["prompt"] is None:
        raise ApiError(400, "'prompt' is required: a string or a list of token ids", param="prompt")
    prompt = body["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]      # a batch of one, as some clients send
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
        raise ApiError(400, "batched prompts are not supported; send one prompt per request", param="prompt")
    raise ApiError(400, "'prompt' must be a string or a list of token ids", param="prompt")


def parse_completion(body: dict) -> GenerationRequest:
    stream, include_usage = _stream_options(body)
    return GenerationRequest(chat=False, model=_field(body, "model", str, None), prompt=_prompt(body),
                             params=_sampling_params(body, default_max_tokens=16), stream=stream,
                             include_usage=include_usage, priority=_field(body, "priority", int, 0))


def parse_chat(body: dict, render) -> GenerationRequest:
    """`render(messages) -> str` applies the model's chat template (or the plain fallback)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' is required: a non-empty list of {role, content}", param="messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a string 'role'", param="messages")
        content = m.get("content")
        if isinstance(content, list):   # [{"type": "text", "text": ...}] parts: keep the text ones
            m["content"] = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        elif content is not None and not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be a string or a list of text parts", param="messages")
    stream, include_usage = _stream_options(body)
    return GenerationRequest(chat=True, model=_field(body, "model", str, None), prompt=render(messages),
                             params=_sampling_params(body, default_max_tokens=None,
                                                     max_tokens_field="max_completion_tokens"),
                             stream=stream, include_usage=include_usage, priority=_field(body, "priority", int, 0))


def plain_chat_prompt(messages: list[dict]) -> str:
    """The documented fallback for models without a chat template: 'role: content' lines, then 'assistant:'."""
    lines = [f"{m['role']}: {m.get('content') or ''}" for m in messages]
    return "\n".join(lines) + "\nassistant:"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def chunk(req: GenerationRequest, request_id: str, model: str, text: str, finish_reason: str | None,
          first: bool, created: int | None = None) -> dict:
    created = created or int(time.time())
    if req.chat:
        delta = {"content": text}
        if first:
            delta = {"role": "assistant", "content": text}
        return {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
    return {"id": request_id, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}]}


def usage_chunk(req: GenerationRequest, request_id: str, model: str, prompt_tokens: int, completion_tokens: int) -> dict:
    obj = "chat.completion.chunk" if req.chat else "text_completion"
    return {"id": request_id, "object": obj, "created": int(time.time()), "model": model, "choices": [],
            "usage": usage(prompt_tokens, completion_tokens)}


def full_response(req: GenerationRequest, request_id: str, model: str, text: str, finish_reason: str | None,
                  prompt_tokens: int, completion_tokens: int) -> dict:
    if req.chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                  "finish_reason": finish_reason}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        obj = "text_completion"
    return {"id": request_id, "object": obj, "created": int(time.time()), "model": model, "choices": [choice],
            "usage": usage(prompt_tokens, completion_tokens)}
