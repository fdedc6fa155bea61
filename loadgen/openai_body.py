"""The HTTP request a RequestSpec becomes: an OpenAI streaming completions or chat request.

The same function builds the sweep's requests, the preflight's and the calibration's, so what
the preflight learned a server refuses (`TargetSpec.omit_fields`) is left out everywhere.
"""

from __future__ import annotations

import json

from loadgen.specs import TargetSpec
from loadgen.workloads import RequestSpec

# Fields outside the core OpenAI API that the sweep sends; a server may refuse any of them.
OPTIONAL_FIELDS = ("ignore_eos", "min_tokens", "stream_options")


def request_dict(spec: RequestSpec, target: TargetSpec, stream: bool = True) -> dict:
    body: dict = {"model": target.model, "max_tokens": spec.max_tokens, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
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
        body.pop(name, None)
    return body


def request_body(spec: RequestSpec, target: TargetSpec) -> bytes:
    """Serialized once, before the send time is taken, so JSON encoding is not part of the TTFT."""
    return json.dumps(request_dict(spec, target), separators=(",", ":")).encode()


def request_headers(target: TargetSpec) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream",
               # A compressed event stream cannot be read line by line as it arrives.
               "Accept-Encoding": "identity"}
    if target.api_key:
        headers["Authorization"] = f"Bearer {target.api_key}"
    return headers
