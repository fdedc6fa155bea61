"""The preflight: one real streaming request with the sweep's exact body before the first level.

Each refusal becomes an action and a line a user can read. A field the server refuses (ignore_eos,
min_tokens, stream_options, ...) is dropped and what that costs is recorded; refused token-id
prompts switch to text; a bad key, an unknown model or an unreachable server stop the sweep with
the server's own message. Every change is an Adaptation, kept in run.json (target.adaptations)
and shown in the report; `strict` turns any change into an error instead.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, replace

from loadgen.openai_body import OPTIONAL_FIELDS, request_dict, sends_field
from loadgen.specs import TargetSpec
from loadgen.target_probe import Reply, TargetClient, TargetError
from loadgen.workloads import RequestSpec

MAX_ATTEMPTS = 6
RETRY_AFTER_S = 2.0
# What a server says when it takes string prompts only (transformers serve, TGI, llama.cpp, ...).
_TEXT_ONLY = re.compile(
    r"(prompt|input).{0,40}(must be|should be|expected|only).{0,20}(str|text)|"
    r"(str|string|text) (type )?expected|token[ _-]?ids?.{0,30}(not supported|unsupported)|"
    r"list.{0,20}(not (a )?valid|not supported).{0,20}prompt",
    re.I,
)
_CONSEQUENCE = {
    "ignore_eos": "output lengths are not enforced: completions may stop at EOS before max_tokens",
    "min_tokens": "a minimum output length is not enforced",
    "continuous_usage_stats": "usage only at the end of a stream: a token sent with no text (part of a UTF-8 "
    "character) is not seen, so a first-token time may be one chunk late",
    "stream_options": "no usage in the stream: token counts come from a `length` finish, the client tokenizer, "
    "or are estimated from the chunks (flagged as estimates)",
}


@dataclass
class Adaptation:
    """One thing the preflight changed about the requests, and why."""

    field: str  # the request field or setting concerned
    action: str  # dropped | switched to text | ...
    reason: str  # the server's own words
    consequence: str  # what it means for the figures

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        return f"{self.field} {self.action}: {self.consequence} (server said: {self.reason})"


@dataclass
class PreflightResult:
    target: TargetSpec  # with the fields the server refused left out
    prompt_format: str  # text | ids
    adaptations: list[Adaptation]
    reply: Reply  # the successful answer


def _refused_field(message: str, body: dict) -> str | None:
    """The optional request field the server names in its refusal. A refusal of stream_options while
    continuous_usage_stats is still in it drops that first: include_usage is worth keeping."""
    for name in [
        *OPTIONAL_FIELDS,
        *(k for k in body if k not in ("model", "prompt", "messages", "max_tokens", "stream")),
    ]:
        if sends_field(body, name) and re.search(rf"\b{re.escape(name)}\b", message):
            if name == "stream_options" and sends_field(body, "continuous_usage_stats"):
                return "continuous_usage_stats"
            return name
    return None


def _fatal(status: int, message: str, target: TargetSpec, client: TargetClient) -> TargetError | None:
    """A refusal no change to the body can fix."""
    if status in (401, 403):
        return TargetError(
            f"{target.url} refused the credentials (HTTP {status}: {message}); pass --api-key KEY or set OPENAI_API_KEY"
        )
    if status == 404 and re.search(r"model", message, re.I):
        served = ", ".join(str(m["id"]) for m in client.served_models()) or "none listed"
        return TargetError(f"{target.url} does not serve the model {target.model!r} ({message}); it serves: {served}")
    if status == 404:
        return TargetError(
            f"{target.url}{target.path} does not exist (HTTP 404: {message}); "
            "try --endpoint chat or completions, or check the URL"
        )
    if status >= 500 or status == 0:
        return TargetError(f"{target.url} failed on the preflight request (HTTP {status}: {message})")
    return None


def preflight(
    client: TargetClient, spec: RequestSpec, text_spec: RequestSpec | None, prompt_format: str, strict: bool = False
) -> PreflightResult:
    """Send `spec` as the sweep would; adapt until the server answers a stream with tokens.
    `text_spec`: the same request with a text prompt, for a server that refuses token ids."""
    target = client.target
    adaptations: list[Adaptation] = []
    retried = False
    for _ in range(MAX_ATTEMPTS):
        body = request_dict(spec, target)
        reply = client.stream(target.path, body)
        if reply.ok:
            _check_answer(reply, spec, target, adaptations)
            break
        if reply.status in (0, 200) and not retried:
            retried = True  # a server's first request may warm it up and fail: ask once more
            time.sleep(RETRY_AFTER_S)
            continue
        if reply.timed_out:  # twice: not a warm-up hiccup
            raise TargetError(f"{target.url} did not answer the preflight request: {reply.message}")
        if reply.status in (0, 200):  # the stream itself failed: the server's words, no guessing
            raise TargetError(f"{target.url} answered the preflight with a broken stream: {reply.message}")
        fatal = _fatal(reply.status, reply.message, target, client)
        if fatal is not None:
            raise fatal
        name = _refused_field(reply.message, body)
        if name is not None:
            adaptations.append(
                Adaptation(
                    name,
                    "dropped",
                    f"HTTP {reply.status}: {reply.message}",
                    _CONSEQUENCE.get(name, f"the request is sent without {name}"),
                )
            )
            target = replace(
                target,
                omit_fields=[*target.omit_fields, name],
                send_ignore_eos=target.send_ignore_eos and name != "ignore_eos",
            )
            client.target = target
            continue
        if (
            prompt_format == "ids"
            and text_spec is not None
            and (_TEXT_ONLY.search(reply.message) or reply.status == 422)
        ):
            adaptations.append(
                Adaptation(
                    "prompt",
                    "switched to text",
                    f"HTTP {reply.status}: {reply.message}",
                    "prompts are text sized to the requested token counts",
                )
            )
            prompt_format, spec = "text", text_spec
            continue
        raise TargetError(f"{target.url} refused the sweep's request (HTTP {reply.status}): {reply.message}")
    else:
        raise TargetError(
            f"{target.url}: the preflight request still fails after {MAX_ATTEMPTS} adaptations: "
            + "; ".join(a.line() for a in adaptations)
        )
    if strict and adaptations:
        raise TargetError(
            "--strict: the target needs these changes to the requests: " + "; ".join(a.line() for a in adaptations)
        )
    return PreflightResult(target, prompt_format, adaptations, reply)


def _check_answer(reply: Reply, spec: RequestSpec, target: TargetSpec, adaptations: list[Adaptation]) -> None:
    """What a successful answer says about the figures to come."""
    s = reply.stream
    assert s is not None
    if s.token_chunks == 0:
        # The server's own reason, where it gave one: 'length' before any token is a prompt that fills
        # its context (llama.cpp's server does that), 'stop' a model that ended at once.
        why = {
            "length": f"finish_reason 'length' before any token: a prompt of about {spec.target_input_len} tokens may "
            "fill the server's context (lower --input-len, or raise the server's context size)",
            "stop": "finish_reason 'stop' before any token: the model ended at once (the server may not honour "
            "ignore_eos)",
        }.get(s.finish_reason or "", "the server may not stream tokens")
        raise TargetError(f"{target.url} answered the preflight stream with no generated text; {why}")
    if s.completion_tokens is None and "stream_options" not in target.omit_fields:
        adaptations.append(
            Adaptation("usage", "missing", "the stream carried no usage object", _CONSEQUENCE["stream_options"])
        )
    if s.completion_tokens is not None and s.completion_tokens != spec.max_tokens and not target.send_ignore_eos:
        adaptations.append(
            Adaptation(
                "max_tokens",
                "not honoured",
                f"{s.completion_tokens} of {spec.max_tokens} tokens (finish_reason {s.finish_reason})",
                "output lengths are what the model chose; the report shows the achieved lengths",
            )
        )
