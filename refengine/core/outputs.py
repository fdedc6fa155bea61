"""The only two things that cross between the scheduler and the model runner.

The runner is stateless across steps apart from per-request random generators: each
`ScheduledRequest` carries the tokens to compute, where they start and the full block table,
so the same `SchedulerOutput` can be broadcast to other ranks unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from refengine.sampling_params import SamplingParams


@dataclass
class ScheduledRequest:
    req_id: str
    token_ids: list[int]  # the tokens computed this step: all_token_ids[start_pos:start_pos+n]
    start_pos: int  # num_computed_tokens before this step (= position of token_ids[0])
    block_ids: list[int]  # the request's whole block table after allocation
    sample: bool  # True when this step reaches the last known token: sample one
    sampling_params: SamplingParams
    num_output_tokens: int = 0  # tokens generated so far (min_tokens needs it)
    eos_token_id: int | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def end_pos(self) -> int:
        return self.start_pos + len(self.token_ids)


@dataclass
class SchedulerOutput:
    step_id: int
    requests: list[ScheduledRequest]
    # Requests that finished or were aborted since the last step: the runner drops their state.
    finished_req_ids: set[str] = field(default_factory=set)
    preempted_req_ids: set[str] = field(default_factory=set)

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(len(r.token_ids) for r in self.requests)

    @property
    def is_empty(self) -> bool:
        return not self.requests


@dataclass
class ModelRunnerOutput:
    # One sampled token per request whose ScheduledRequest.sample was True.
    sampled_token_ids: dict[str, int] = field(default_factory=dict)
