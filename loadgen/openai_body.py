"""The HTTP request a RequestSpec becomes: an OpenAI streaming completions or chat request."""

from __future__ import annotations

import json

from loadgen.specs import TargetSpec
from loadgen.workloads import RequestSpec


def request_body(spec: RequestSpec, target: TargetSpec) -> bytes:
    """Serialized once, before the send time is taken, so JSON encoding is not part of the TTFT."""
    body: dict = {"model": target.model, "max_tokens": spec.max_tokens, "stream": True,
                  "stream_options": {"include_usage": True}}
    if target.endpoint == "chat":
        if not isinstance(spec.prompt, str):
            raise ValueError("the chat endpoint needs text prompts (use the sharegpt workload, or completions)")
        body["messages"] = [{"role": "user", "content": spec.prompt}]
    else:
        body["prompt"] = spec.prompt
    if target.send_ignore_eos:
        # Without it a model may stop early and the output length is not what the level asked for.
        body["ignore_eos"] = True
    body.update(spec.extra)
    return json.dumps(body, separators=(",", ":")).encode()


def request_headers(target: TargetSpec) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
               # A compressed event stream cannot be read line by line as it arrives.
               "Accept-Encoding": "identity"}
    if target.api_key:
        headers["Authorization"] = f"Bearer {target.api_key}"
    return headers
