"""A request as the engine core sees it: token ids, progress and timestamps.

The invariant the whole scheduler rests on: `num_computed_tokens <= num_tokens`, and a step
schedules `num_tokens - num_computed_tokens` tokens (or a chunk of them). Prefill, chunked
prefill, a prefix-cache hit and resumption after preemption are all that one catch-up.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from refengine.sampling_params import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"  # EOS, a stop token or a stop string
    FINISHED_LENGTH = "length"  # max_tokens or max_model_len reached
    FINISHED_ABORTED = "abort"  # client went away or the caller aborted

    @property
    def finished(self) -> bool:
        return self in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_ABORTED)

    @property
    def finish_reason(self) -> str | None:
        return self.value if self.finished else None


@dataclass
class RequestTimestamps:
    """time.monotonic() seconds; None until the event happens."""

    arrival: float
    first_scheduled: float | None = None
    first_token: float | None = None
    preemptions: list[float] = field(default_factory=list)
    finished: float | None = None


class Request:
    """Mutable per-request state owned by the scheduler."""

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        sampling_params: SamplingParams,
        eos_token_id: int | None = None,
        arrival_time: float | None = None,
        priority: int = 0,
    ):
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self.sampling_params = sampling_params
        self.eos_token_id = eos_token_id
        self.priority = priority
        self.output_token_ids: list[int] = []
        self.num_computed_tokens = 0
        # Tokens found in the prefix cache when the request was last admitted (for stats).
        self.num_cached_tokens = 0
        self.status = RequestStatus.WAITING
        self.num_preemptions = 0
        now = time.monotonic() if arrival_time is None else arrival_time
        self.timestamps = RequestTimestamps(arrival=now)
        # Chained hashes of this request's full blocks, extended lazily by the KV cache manager.
        self.block_hashes: list[int] = []

    @property
    def arrival_time(self) -> float:
        return self.timestamps.arrival

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def max_tokens(self) -> int | None:
        return self.sampling_params.max_tokens

    def is_finished(self) -> bool:
        return self.status.finished

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, status={self.status.value}, prompt={self.num_prompt_tokens}, "
            f"out={self.num_output_tokens}, computed={self.num_computed_tokens})"
        )
