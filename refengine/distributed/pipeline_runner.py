"""One pipeline stage's part of a step, with micro-batches so the stages overlap.

Every rank receives the same SchedulerOutput and splits its requests the same way into up to
`num_micro_batches` contiguous micro-batches of about equal token counts. Stage s runs them in
order: a stage after the first receives (hidden, residual) for the micro-batch from its TP peer
in stage s - 1 (shapes are known from the SchedulerOutput, so no metadata is exchanged), runs
its layers, and sends the pair on with isend, so it moves to the next micro-batch while stage
s + 1 works on this one. The last stage computes logits and samples; its sampler rank sends
the step's tokens (one per sampling row, in request order) to the driver.

With PP stages and MB micro-batches of equal cost, each stage idles for (PP - 1) of the
(PP + MB - 1) slots of a step: the bubble (DESIGN section 8). `stats` keeps the time this rank
computed and the time its steps took, from which the executor reports the measured bubble.

vLLM overlaps whole steps instead (a batch queue of PP scheduled batches, the scheduler
advancing requests when it schedules them). Here the scheduler advances a request when its
tokens come back, so the overlap is inside a step; the bubble arithmetic is the same.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from refengine.core.outputs import ModelRunnerOutput, ScheduledRequest, SchedulerOutput
from refengine.distributed.parallel_config import RankInfo
from refengine.runner.model_runner import ModelRunner, StepTimings


def split_micro_batches(requests: list[ScheduledRequest], n: int) -> list[list[ScheduledRequest]]:
    """Contiguous groups (request order is kept, so sampled tokens stay in order) of ~equal tokens."""
    n = max(1, min(n, len(requests)))
    total = sum(r.num_tokens for r in requests)
    groups: list[list[ScheduledRequest]] = [[]]
    done = 0
    for i, r in enumerate(requests):
        left_requests, left_groups = len(requests) - i, n - len(groups)
        # Close the group at its share of tokens, but keep one request for each group still to come.
        if groups[-1] and left_groups > 0 and (done >= total * len(groups) / n or left_requests <= left_groups):
            groups.append([])
        groups[-1].append(r)
        done += r.num_tokens
    return groups


@dataclass
class StageStats:
    steps: int = 0
    busy_s: float = 0.0   # forward (and logits/sampling) compute on this rank
    wall_s: float = 0.0   # from the step's start to its last send/recv on this rank


class PipelineStageRunner(ModelRunner):
    def __init__(self, model, kv_caches, block_size, device, seed, info: RankInfo, num_micro_batches: int,
                 hidden_size: int, dtype: torch.dtype):
        super().__init__(model, kv_caches, block_size, device, seed, samples=info.samples)
        self.info = info
        self.num_micro_batches = num_micro_batches
        self.hidden_size, self.dtype = hidden_size, dtype
        self.stats = StageStats()

    def _recv_intermediate(self, num_tokens: int):
        shape = (num_tokens, self.hidden_size)
        hidden = torch.empty(shape, dtype=self.dtype, device=self.device)
        residual = torch.empty(shape, dtype=self.dtype, device=self.device)
        src = self.info.stage_rank(self.info.pp_rank - 1)
        dist.recv(hidden, src=src)
        dist.recv(residual, src=src)
        return hidden, residual

    @torch.inference_mode()
    def execute_model(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        self.sampler.forget(sched.finished_req_ids)
        if sched.is_empty:
            return ModelRunnerOutput()
        info = self.info
        t_start = time.perf_counter()
        busy = 0.0
        sends, tokens, sample_ids = [], [], []
        for mb in split_micro_batches(sched.requests, self.num_micro_batches):
            input_ids, positions, meta, sample_index, rows = self._prepare(SchedulerOutput(sched.step_id, mb))
            intermediate = None if info.is_first_stage else self._recv_intermediate(len(input_ids))
            t0 = time.perf_counter()
            out = self.model(input_ids, positions, self.kv_caches, meta, intermediate)
            if not info.is_last_stage:
                busy += time.perf_counter() - t0
                dst = info.stage_rank(info.pp_rank + 1)
                sends += [dist.isend(t.contiguous(), dst=dst) for t in out]
                continue
            sample_ids += [row.req_id for row in rows]
            if rows:
                logits = self.model.compute_logits(out[sample_index])
                if self.samples:
                    tokens += self.sampler(logits, rows)
            busy += time.perf_counter() - t0
        for work in sends:
            work.wait()
        result = self._return_tokens(sched, tokens, sample_ids)
        wall = time.perf_counter() - t_start
        self.stats.steps += 1
        self.stats.busy_s += busy
        self.stats.wall_s += wall
        self.last_timings = StepTimings(forward_s=busy)
        return result

    def _return_tokens(self, sched: SchedulerOutput, tokens: list[int], sample_ids: list[str]) -> ModelRunnerOutput:
        """The sampler rank sends the step's tokens to the driver; the driver returns them."""
        info = self.info
        if info.samples and info.is_driver:
            return ModelRunnerOutput(dict(zip(sample_ids, tokens)))
        if info.samples:
            if tokens:  # the driver expects exactly one token per sampling row, and none when there are none
                dist.send(torch.tensor(tokens, dtype=torch.long, device=self.device), dst=0)
            return ModelRunnerOutput()
        if info.is_driver:
            ids = [r.req_id for r in sched.requests if r.sample]
            if not ids:
                return ModelRunnerOutput()
            buf = torch.empty(len(ids), dtype=torch.long, device=self.device)
            dist.recv(buf, src=info.sampler_rank)
            return ModelRunnerOutput(dict(zip(ids, buf.tolist())))
        return ModelRunnerOutput()
