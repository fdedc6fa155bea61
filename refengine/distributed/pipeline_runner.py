"""One pipeline stage's part of a step: micro-batches within a step, or whole batches in a queue.

Every rank receives the same SchedulerOutput. Two schedules (`--pipeline-schedule`):

- micro-batch: every rank splits the step's requests the same way into up to `num_micro_batches`
  contiguous micro-batches of about equal token counts. Stage s runs them in order: a stage after
  the first receives (hidden, residual) for the micro-batch from its TP peer in stage s - 1
  (shapes are known from the SchedulerOutput, so no metadata is exchanged), runs its layers and
  sends the pair on with isend, so it moves to the next micro-batch while stage s + 1 works on
  this one. Bubble per step: (PP - 1) / (PP + MB - 1) (docs/yardsticks.md).
- batch-queue (vLLM's): each scheduled batch is one micro-batch, and the overlap is across steps:
  the driver (stage 0) `submit`s batch N + 1 while later stages still compute batch N, and
  `collect`s a batch's tokens when the engine needs them (refengine/distributed/batch_queue.py).
  Every stage runs batches in the order they were scheduled.

The last stage computes logits and samples; its sampler rank sends the step id followed by the
step's tokens (one per sampling row, in request order) to the driver, which checks the id, so a
batch's tokens can never be taken for another's. `stats` keeps the time this rank computed and
the time its steps took, from which the executor reports the measured bubble.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from refengine.core.outputs import ModelRunnerOutput, ScheduledRequest, SchedulerOutput
from refengine.parallel.layout import RankInfo
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
    busy_s: float = 0.0  # forward (and logits/sampling) compute on this rank
    wall_s: float = 0.0  # from the step's start to its last send/recv on this rank


@dataclass
class PendingBatch:
    """A batch the driver submitted whose tokens have not been collected yet."""

    sched: SchedulerOutput
    sends: list[dist.Work] = field(default_factory=list)  # isend works (activations, control message)
    buffers: list[torch.Tensor] = field(default_factory=list)  # kept alive until the sends complete
    token_recv: dist.Work | None = None  # irecv work of [step_id, tokens...], or None
    token_buf: torch.Tensor | None = None
    sample_ids: list[str] = field(default_factory=list)


class PipelineStageRunner(ModelRunner):
    def __init__(
        self,
        model,
        kv_caches,
        block_size,
        device,
        seed,
        info: RankInfo,
        num_micro_batches: int,
        hidden_size: int,
        dtype: torch.dtype,
    ):
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

    def _run_stage(self, sched: SchedulerOutput, num_micro_batches: int):
        """This stage's layers over the step, micro-batch by micro-batch. Returns (send works and their
        tensors, sampled tokens, their request ids, compute seconds)."""
        info = self.info
        busy = 0.0
        sends, buffers, tokens, sample_ids = [], [], [], []
        for mb in split_micro_batches(sched.requests, num_micro_batches):
            input_ids, positions, meta, sample_index, rows = self._prepare(SchedulerOutput(sched.step_id, mb))
            intermediate = None if info.is_first_stage else self._recv_intermediate(len(input_ids))
            t0 = time.perf_counter()
            out = self.model(input_ids, positions, self.kv_caches, meta, intermediate)
            if not info.is_last_stage:
                busy += time.perf_counter() - t0
                dst = info.stage_rank(info.pp_rank + 1)
                pair = [t.contiguous() for t in out]
                buffers += pair
                sends += [dist.isend(t, dst=dst) for t in pair]
                continue
            sample_ids += [row.req_id for row in rows]
            if rows:
                logits = self.model.compute_logits(out[sample_index])
                if self.samples:
                    tokens += self.sampler(logits, rows)
            busy += time.perf_counter() - t0
        return sends, buffers, tokens, sample_ids, busy

    def _account(self, busy: float, wall: float) -> None:
        self.stats.steps += 1
        self.stats.busy_s += busy
        self.stats.wall_s += wall
        self.last_timings = StepTimings(forward_s=busy)

    @torch.inference_mode()
    def execute_model(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        """Run the whole step on this rank (every rank but a batch-queue driver)."""
        self.sampler.forget(sched.finished_req_ids)
        if sched.is_empty:
            return ModelRunnerOutput()
        t_start = time.perf_counter()
        sends, _buffers, tokens, sample_ids, busy = self._run_stage(sched, self.num_micro_batches)
        for work in sends:
            work.wait()
        result = self._return_tokens(sched, tokens, sample_ids)
        self._account(busy, time.perf_counter() - t_start)
        return result

    # ----- batch queue (driver only) -------------------------------------------------------
    @torch.inference_mode()
    def submit(self, sched: SchedulerOutput) -> PendingBatch:
        """Stage 0 of a non-empty batch; returns at once after handing it on (no wait for later stages)."""
        info = self.info
        assert info.is_driver and not info.is_last_stage, "the batch queue runs on a pipeline's driver"
        self.sampler.forget(sched.finished_req_ids)
        pending = PendingBatch(sched, sample_ids=[r.req_id for r in sched.requests if r.sample])
        if pending.sample_ids:
            # Posted before computing, so the sampler rank never waits for the driver to take its tokens.
            pending.token_buf = torch.empty(1 + len(pending.sample_ids), dtype=torch.long, device=self.device)
            pending.token_recv = dist.irecv(pending.token_buf, src=info.sampler_rank)
        sends, buffers, _, _, busy = self._run_stage(sched, 1)
        pending.sends += sends
        pending.buffers += buffers
        self.stats.steps += 1
        self.stats.busy_s += busy
        self.last_timings = StepTimings(forward_s=busy)
        return pending

    def collect(self, pending: PendingBatch) -> ModelRunnerOutput:
        """Block until the batch's tokens came back from the sampler rank."""
        for work in pending.sends:
            work.wait()
        if pending.token_recv is None or pending.token_buf is None:  # set together, in submit
            return ModelRunnerOutput()
        pending.token_recv.wait()
        return self._tokens_from(pending.sched, pending.token_buf, pending.sample_ids)

    # ----- tokens back to the driver -------------------------------------------------------
    @staticmethod
    def _tokens_from(sched: SchedulerOutput, buf: torch.Tensor, ids: list[str]) -> ModelRunnerOutput:
        values = buf.tolist()
        assert values[0] == sched.step_id, f"tokens of step {values[0]} arrived for step {sched.step_id}"
        return ModelRunnerOutput(dict(zip(ids, values[1:])))

    def _return_tokens(self, sched: SchedulerOutput, tokens: list[int], sample_ids: list[str]) -> ModelRunnerOutput:
        """The sampler rank sends the step's tokens to the driver; the driver returns them."""
        info = self.info
        if info.samples and info.is_driver:
            return ModelRunnerOutput(dict(zip(sample_ids, tokens)))
        if info.samples:
            if tokens:  # the driver expects exactly one token per sampling row, and none when there are none
                dist.send(torch.tensor([sched.step_id, *tokens], dtype=torch.long, device=self.device), dst=0)
            return ModelRunnerOutput()
        if info.is_driver:
            ids = [r.req_id for r in sched.requests if r.sample]
            if not ids:
                return ModelRunnerOutput()
            buf = torch.empty(1 + len(ids), dtype=torch.long, device=self.device)
            dist.recv(buf, src=info.sampler_rank)
            return self._tokens_from(sched, buf, ids)
        return ModelRunnerOutput()
