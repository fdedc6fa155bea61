"""The HTTP request a RequestSpec becomes: an OpenAI streaming completions or chat request.

The same function builds the sweep's requests, the preflight's and the calibration's, so what
the preflight learned a server refuses (`TargetSpec.omit_fields`) is left out everywhere.
"""

from __future__ import annotations

import json

from loadgen.specs import TargetSpec
from loadgen.workloads import RequestSpec

# Fields outside the core OpenAI API that the sweep sends; a server may refuse any of them.
# continuous_usage_stats lives inside stream_options and is refusable on its own, so a server that
# refuses it keeps include_usage; it is named before stream_options so a refusal naming both
# ("stream_options.continuous_usage_stats") drops only it.
OPTIONAL_FIELDS = ("ignore_eos", "min_tokens", "continuous_usage_stats", "stream_options")
NESTED_FIELDS = {"continuous_usage_stats": "stream_options"}  # optional field -> the object holding it


def request_dict(spec: RequestSpec, target: TargetSpec, stream: bool = True) -> dict:
    body: dict = {"model": target.model, "max_tokens": spec.max_tokens, "stream": stream}
    if stream:
        # continuous_usage_stats (vLLM): usage in every chunk, so a token whose text is an incomplete
        # UTF-8 character (an empty-text chunk) still shows when it came (loadgen/sse.py, docs/metrics.md).
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    if target.endpoint == "chat":
        if not isinstance(spec.prompt, str):
            raise ValueError("the chat endpoint needs text prompts (--prompt-format text)")
        body["messages"] = spec.messages or [{"role": "user", "content": spec.prompt}]
    else:
        body["prompt"] = spec.prompt
    if target.send_ignore_eos:
        # Without it a model may stop early and the output length is not what the level asked for.
        body["ignore_eos"] = True
    body.update(spec.extra)
    for name in target.omit_fields:
        holder = NESTED_FIELDS.get(name)
        if holder is None:
            body.pop(name, None)
        elif isinstance(body.get(holder), dict):
            body[holder] = {k: v for k, v in body[holder].items() if k != name}
    return body


def sends_field(body: dict, name: str) -> bool:
    """Is the optional field `name` in `body` (at the top level, or in the object NESTED_FIELDS names)?"""
    holder = NESTED_FIELDS.get(name)
    return name in body if holder is None else isinstance(body.get(holder), dict) and name in body[holder]


def fixed_output_len(body: dict) -> int | None:
    """max_tokens when the request pins its output length (ignore_eos, or min_tokens >= max_tokens): a
    stream that then ends short of it without a `length` finish was cut off (loadgen/sse.py)."""
    n = body.get("max_tokens")
    if not isinstance(n, int) or n <= 0:
        return None
    min_tokens = body.get("min_tokens")
    if body.get("ignore_eos") is True or (isinstance(min_tokens, int) and min_tokens >= n):
        return n
    return None


def request_body(spec: RequestSpec, target: TargetSpec) -> bytes:
    """Serialized once, before the send time is taken, so JSON encoding is not part of the TTFT."""
    return json.dumps(request_dict(spec, target), separators=(",", ":")).encode()


def request_headers(target: TargetSpec) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        # A compressed event stream cannot be read line by line as it arrives.
        "Accept-Encoding": "identity",
    }
    if target.api_key:
        headers["Authorization"] = f"Bearer {target.api_key}"
    return headers
