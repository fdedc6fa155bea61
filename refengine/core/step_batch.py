"""`StepBatch`: the batch one `Scheduler.schedule()` call is building, and the slice it takes of a request.

A step has a token budget (`max_num_batched_tokens`) and a request cap (`max_num_seqs`, or a
batch-queue share). Running requests are added first, then waiting ones; a running request
preempted after it was added gives its tokens back to the budget. `scheduled_request` cuts the
`ScheduledRequest` a request contributes: its next `num_new` tokens and its whole block table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from refengine.core.outputs import ScheduledRequest
from refengine.request import Request


@dataclass
class StepBatch:
    budget: int  # tokens this step may still compute
    max_requests: int  # requests this step may take
    scheduled: dict[str, ScheduledRequest] = field(default_factory=dict)  # in batch order
    preempted: set[str] = field(default_factory=set)

    @property
    def is_full(self) -> bool:
        return self.budget <= 0 or len(self.scheduled) >= self.max_requests

    def add(self, sched: ScheduledRequest) -> None:
        self.scheduled[sched.req_id] = sched
        self.budget -= sched.num_tokens

    def unschedule(self, req_id: str) -> None:
        """Take a request back out of this step (it was preempted); its tokens return to the budget."""
        sched = self.scheduled.pop(req_id, None)
        if sched is not None:
            self.budget += sched.num_tokens


def scheduled_request(request: Request, num_new: int, block_ids: list[int]) -> ScheduledRequest:
    """The request's next `num_new` tokens (from num_computed_tokens on) as a ScheduledRequest."""
    start = request.num_computed_tokens
    end = start + num_new
    prompt_len = request.num_prompt_tokens
    # Avoid concatenating prompt + output every decode step.
    if start >= prompt_len:
        token_ids = request.output_token_ids[start - prompt_len : end - prompt_len]
    else:
        token_ids = request.prompt_token_ids[start:end] + request.output_token_ids[: max(0, end - prompt_len)]
    return ScheduledRequest(
        req_id=request.request_id,
        token_ids=token_ids,
        start_pos=start,
        block_ids=block_ids,
        sample=end == request.num_tokens,
        sampling_params=request.sampling_params,
        num_output_tokens=request.num_output_tokens,
        eos_token_id=request.eos_token_id,
    )
