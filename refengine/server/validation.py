"""Turning a parsed JSON body into a GenerationRequest, or a 400 that names the field.

Unknown fields are ignored (clients send vendor extras; other servers reject `ignore_eos`, ours
must not). Known fields of the wrong type or out of range get a 400 with `param` set; the ranges
themselves are SamplingParams' (refengine/sampling_params.py), so the offline API and the server
refuse the same values. The body has already passed request_body.parse_json (depth, Unicode).
"""

from __future__ import annotations

from refengine.sampling_params import INT64_MAX, INT64_MIN, SamplingParamError, SamplingParams
from refengine.server.protocol import ApiError, GenerationRequest
from refengine.server.request_body import HugeInt

_MISSING = object()
_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "a boolean", list: "a list", dict: "an object"}


def field(body: dict, name: str, types, default=None, shown: str | None = None):
    """body[name] if it has one of `types` (bool is never an int here), else 400; missing or null → default."""
    shown = shown or name
    types = types if isinstance(types, tuple) else (types,)
    value = body.get(name, _MISSING)
    if value is _MISSING or value is None:
        return default
    if isinstance(value, HugeInt):
        raise ApiError(400, f"'{shown}' must be {_type_names(types)} within 64 bits, got {value!r}", param=shown)
    if isinstance(value, bool) and bool not in types:
        raise ApiError(400, f"'{shown}' must be {_type_names(types)}, got a boolean", param=shown)
    if not isinstance(value, types):
        raise ApiError(400, f"'{shown}' must be {_type_names(types)}, got {_type_name(value)}", param=shown)
    return value


def _type_names(types: tuple) -> str:
    return " or ".join(_NAMES.get(t, t.__name__) for t in types)


def _type_name(value) -> str:
    return "null" if value is None else _NAMES.get(type(value), type(value).__name__).split(" ")[-1]


def _int64(body: dict, name: str, default: int) -> int:
    value = field(body, name, int, default)
    if not INT64_MIN <= value <= INT64_MAX:
        raise ApiError(400, f"'{name}' must be a 64-bit integer, got {value}", param=name)
    return value


def sampling_params(body: dict, default_max_tokens: int | None, max_tokens_field: str = "max_tokens") -> SamplingParams:
    max_tokens = field(body, max_tokens_field, int, field(body, "max_tokens", int, default_max_tokens))
    stop = field(body, "stop", (str, list), None)
    if isinstance(stop, list) and not all(isinstance(s, str) for s in stop):
        raise ApiError(400, "'stop' must be a string or a list of strings", param="stop")
    stop_token_ids = field(body, "stop_token_ids", list, None)
    if stop_token_ids is not None and not all(isinstance(t, int) and not isinstance(t, bool) for t in stop_token_ids):
        raise ApiError(400, "'stop_token_ids' must be a list of integers", param="stop_token_ids")
    try:
        return SamplingParams(
            n=field(body, "n", int, 1),
            temperature=field(body, "temperature", (int, float), 1.0),
            top_p=field(body, "top_p", (int, float), 1.0),
            top_k=field(body, "top_k", int, 0),
            seed=field(body, "seed", int, None),
            max_tokens=max_tokens,
            min_tokens=field(body, "min_tokens", int, 0),
            stop=stop,
            stop_token_ids=stop_token_ids,
            ignore_eos=field(body, "ignore_eos", bool, False),
        )
    except SamplingParamError as exc:
        param = max_tokens_field if exc.param == "max_tokens" and max_tokens_field in body else exc.param
        raise ApiError(400, str(exc), param=param) from None


def stream_options(body: dict) -> tuple[bool, bool]:
    stream = field(body, "stream", bool, False)
    options = field(body, "stream_options", dict, {}) or {}
    include_usage = field(options, "include_usage", bool, False, shown="stream_options.include_usage")
    return stream, include_usage


def prompt(body: dict) -> str | list[int]:
    if "prompt" not in body or body["prompt"] is None:
        raise ApiError(400, "'prompt' is required: a string or a list of token ids", param="prompt")
    value = body["prompt"]
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]  # a batch of one, as some clients send
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return value
    if isinstance(value, list) and value and all(isinstance(p, (str, list)) for p in value):
        raise ApiError(400, "batched prompts are not supported; send one prompt per request", param="prompt")
    raise ApiError(400, "'prompt' must be a string or a list of token ids", param="prompt")


def messages(body: dict) -> list[dict]:
    """The chat messages with each `content` as one string (text parts joined, others dropped)."""
    value = body.get("messages")
    if not isinstance(value, list) or not value:
        raise ApiError(400, "'messages' is required: a non-empty list of {role, content}", param="messages")
    out = []
    for i, m in enumerate(value):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a string 'role'", param="messages")
        content = m.get("content")
        if isinstance(content, list):  # [{"type": "text", "text": ...}] parts: keep the text ones
            content = "".join(_text_part(i, j, part) for j, part in enumerate(content))
        elif content is not None and not isinstance(content, str):
            raise ApiError(
                400,
                f"messages[{i}].content must be a string or a list of text parts, got {_type_name(content)}",
                param="messages",
            )
        out.append({**m, "content": content})
    return out


def _text_part(i: int, j: int, part) -> str:
    if not isinstance(part, dict):
        raise ApiError(
            400,
            f'messages[{i}].content[{j}] must be an object like {{"type": "text", "text": ...}}, '
            f"got {_type_name(part)}",
            param="messages",
        )
    if part.get("type") != "text":
        return ""
    text = part.get("text")
    if not isinstance(text, str):
        raise ApiError(
            400, f"messages[{i}].content[{j}].text must be a string, got {_type_name(text)}", param="messages"
        )
    return text


def parse_completion(body: dict) -> GenerationRequest:
    stream, include_usage = stream_options(body)
    return GenerationRequest(
        chat=False,
        model=field(body, "model", str, None),
        prompt=prompt(body),
        params=sampling_params(body, default_max_tokens=16),
        stream=stream,
        include_usage=include_usage,
        priority=_int64(body, "priority", 0),
    )


def parse_chat(body: dict, render) -> GenerationRequest:
    """`render(messages) -> str` applies the model's chat template (or the plain fallback)."""
    msgs = messages(body)
    stream, include_usage = stream_options(body)
    model = field(body, "model", str, None)
    params = sampling_params(body, default_max_tokens=None, max_tokens_field="max_completion_tokens")
    priority = _int64(body, "priority", 0)
    return GenerationRequest(
        chat=True,
        model=model,
        prompt=render(msgs),
        params=params,
        stream=stream,
        include_usage=include_usage,
        priority=priority,
    )
