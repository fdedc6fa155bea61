"""What the engine hands back to callers, in vLLM's shape (`RequestOutput.outputs[0].text`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from refengine.request import RequestTimestamps


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None  # "stop", "length", "abort" or None while running
    stop_reason: str | int | None = None  # the stop string or stop token that ended it


@dataclass
class RequestOutput:
    """Cumulative output of one request after a step, plus what this step added (for streaming)."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    new_token_ids: list[int] = field(default_factory=list)
    new_text: str = ""
    num_cached_tokens: int = 0
    num_preemptions: int = 0
    timestamps: RequestTimestamps | None = None
