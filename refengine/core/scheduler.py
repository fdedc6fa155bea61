"""Continuous batching in one token-budget loop (vLLM v1 style).

Every request has `num_tokens` (prompt + generated) and `num_computed_tokens`; each step
schedules part of the gap between them. A fresh prompt, a chunk of a long prompt, a prompt that
starts after a prefix-cache hit, a request resuming after preemption and a decode step are all
the same thing: catch-up within the step's token budget. Running requests go first (they hold
KV already); waiting ones are admitted with what is left, unless someone was preempted this
step (then memory is tight and admitting would only cause more preemption).

Batch queue (pipeline parallelism, `max_batches_in_flight > 1`; docs/distributed.md): batches
are scheduled while earlier ones are in the pipeline, and progress advances only when a batch
lands, so a request in flight is skipped (its next token is unknown). Checked: a request is in
at most one batch in flight; batches land in order; in-flight requests are never preemption
victims; an aborted in-flight request's blocks are freed only when its batch lands. Each batch
takes at most a 1/max_batches_in_flight share of the live requests, so the next one has work.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from refengine.config import CacheConfig, SchedulerConfig
from refengine.core.kv_cache_manager import KVCacheManager
from refengine.core.outputs import ModelRunnerOutput, ScheduledRequest, SchedulerOutput
from refengine.core.request_queue import create_request_queue
from refengine.core.step_batch import StepBatch, scheduled_request
from refengine.core.stop_conditions import check_stop
from refengine.errors import RefEngineError
from refengine.request import Request, RequestStatus


@dataclass
class SchedulerStats:
    num_running: int
    num_waiting: int
    kv_usage: float
    num_preemptions_total: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_blocks_total: int
    num_free_blocks: int


class Scheduler:
    def __init__(
        self,
        scheduler_config: SchedulerConfig,
        cache_config: CacheConfig,
        clock: Callable[[], float] = time.monotonic,
        max_batches_in_flight: int = 1,
    ):
        self.config = scheduler_config
        self.cache_config = cache_config
        self.clock = clock
        self.max_model_len = scheduler_config.max_model_len
        if cache_config.num_blocks * cache_config.block_size < self.max_model_len:
            # Otherwise one request could outgrow the whole cache and be preempted forever.
            raise RefEngineError(
                f"the KV cache holds {cache_config.num_blocks} blocks of {cache_config.block_size} tokens = "
                f"{cache_config.num_blocks * cache_config.block_size} tokens, less than one request of "
                f"max_model_len {self.max_model_len}; give the cache more memory or lower max_model_len"
            )
        self.kv_cache_manager = KVCacheManager(cache_config, self.max_model_len)
        self.waiting = create_request_queue(scheduler_config.policy, scheduler_config.sjf_aging_tokens_per_s)
        # Admission order: the tail is the most recently admitted (the fcfs/sjf victim).
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.watermark_blocks = int(scheduler_config.watermark * cache_config.num_blocks)
        self.num_preemptions_total = 0
        self._step_id = 0
        self._finished_since_last_step: set[str] = set()
        self._static_batch_open = True
        assert max_batches_in_flight >= 1
        self.max_batches_in_flight = max_batches_in_flight
        self.in_flight: dict[str, int] = {}  # req_id -> step_id of its batch (batch queue only)
        self._free_on_landing: dict[str, Request] = {}  # finished while in flight: freed when it lands

    # ---- intake --------------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        assert 0 < request.num_prompt_tokens < self.max_model_len, (
            f"prompt of {request.num_prompt_tokens} tokens must be in [1, max_model_len={self.max_model_len})"
        )
        assert request.request_id not in self.requests, f"duplicate request id {request.request_id!r}"
        request.status = RequestStatus.WAITING
        self.requests[request.request_id] = request
        self.waiting.add(request)

    # ---- one step ------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        """One step: running requests catch up first, then waiting ones are admitted with what is left."""
        was_running = bool(self.running)
        batch = StepBatch(budget=self.config.max_num_batched_tokens, max_requests=self._batch_request_cap())
        self._schedule_running(batch)
        if self.config.batching == "static":
            self._admit_static(batch, was_running)
        elif not batch.preempted:  # someone was preempted: memory is tight, admitting would preempt more
            self._admit(batch)
        return self._close_step(batch)

    def _close_step(self, batch: StepBatch) -> SchedulerOutput:
        self._step_id += 1
        if self.max_batches_in_flight > 1:
            for req_id in batch.scheduled:
                assert req_id not in self.in_flight, f"request {req_id} would be in two batches in flight"
                self.in_flight[req_id] = self._step_id
        finished, self._finished_since_last_step = self._finished_since_last_step, set()
        return SchedulerOutput(
            step_id=self._step_id,
            requests=list(batch.scheduled.values()),
            finished_req_ids=finished,
            preempted_req_ids=batch.preempted,
        )

    def _batch_request_cap(self) -> int:
        """Most requests this batch may take. In sync mode, no cap beyond max_num_seqs; under the batch
        queue, a 1/max_batches_in_flight share of the live requests, so that one batch does not take
        every request and leave the other stages nothing to overlap with."""
        depth = self.max_batches_in_flight
        if depth == 1:
            return self.config.max_num_seqs
        batches = set(self.in_flight.values())
        assert len(batches) < depth, f"schedule() with {len(batches)} batches in flight (at most {depth})"
        live = len(self.running) + len(self.waiting)
        return max(1, -(-live // depth))

    # ---- running requests ----------------------------------------------------------------

    def _schedule_running(self, batch: StepBatch) -> None:
        """Each running request, in admission order, computes its next chunk; if the KV cache is
        full, the newest (or lowest-priority) running requests are preempted to make room."""
        i = 0
        while i < len(self.running) and not batch.is_full:
            request = self.running[i]
            if request.request_id in self.in_flight:  # its next token is still in the pipeline
                i += 1
                continue
            num_new = self._cap(request.num_tokens - request.num_computed_tokens, batch.budget)
            if num_new <= 0:  # the runner dropped its sampled token; nothing to compute
                i += 1
                continue
            next_i = self._allocate_or_preempt(request, num_new, i, batch)
            if next_i is None:
                break  # the request preempted itself: nothing after it can fit either
            batch.add(self._make_scheduled(request, num_new))
            i = next_i + 1

    def _allocate_or_preempt(self, request: Request, num_new: int, i: int, batch: StepBatch) -> int | None:
        """Allocate `num_new` slots for running[i], preempting victims until they fit. Returns the
        request's index in `running` afterwards (victims before it shift it left), or None if the
        request was itself the victim."""
        while self.kv_cache_manager.allocate_slots(request, num_new) is None:
            victim = self._pick_victim()
            victim_index = self.running.index(victim)
            batch.unschedule(victim.request_id)
            self._preempt(victim)
            batch.preempted.add(victim.request_id)
            if victim is request:
                return None
            if victim_index < i:
                i -= 1
        return i

    def _pick_victim(self) -> Request:
        # In-flight requests are never victims: their batch would land on freed blocks and stale
        # progress. The request being scheduled is not in flight, so there is always a candidate.
        candidates = [r for r in self.running if r.request_id not in self.in_flight]
        if self.config.policy == "priority":
            # Scan newest first so ties go to the most recently admitted: picking the oldest
            # of two equals would let them preempt each other forever.
            return max(reversed(candidates), key=lambda r: (r.priority, r.arrival_time))
        return candidates[-1]

    def _preempt(self, request: Request) -> None:
        """Preempt by recompute: drop the KV (full blocks stay cached) and start over later."""
        assert request.request_id not in self.in_flight, f"{request.request_id} is in flight"
        self.running.remove(request)
        self.kv_cache_manager.free(request)
        request.num_computed_tokens = 0
        request.status = RequestStatus.PREEMPTED
        request.num_preemptions += 1
        request.timestamps.preemptions.append(self.clock())
        self.num_preemptions_total += 1
        self.waiting.prepend(request)

    # ---- waiting requests ----------------------------------------------------------------

    def _admit(self, batch: StepBatch) -> None:
        """Admit waiting requests in queue order while the step, max_num_seqs and the KV cache allow."""
        cfg = self.config
        kv = self.kv_cache_manager
        while self.waiting and len(self.running) < cfg.max_num_seqs and not batch.is_full:
            request = self.waiting.peek()
            assert request.request_id not in self.in_flight, "in-flight requests are never preempted"
            computed_blocks, num_cached = kv.get_computed_blocks(request)
            num_new = request.num_tokens - num_cached
            if cfg.enable_chunked_prefill:
                num_new = self._cap(num_new, batch.budget)
            elif num_new > batch.budget:
                break  # whole prompts only; do not skip ahead of the head of the queue
            # The watermark keeps room for running requests to grow; with none running it
            # would only keep a large prompt out forever.
            watermark = self.watermark_blocks if self.running else 0
            if kv.allocate_slots(request, num_new, computed_blocks, watermark) is None:
                break
            self.waiting.pop()
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_cached
            request.num_cached_tokens = num_cached
            if request.timestamps.first_scheduled is None:
                request.timestamps.first_scheduled = self.clock()
            self.running.append(request)
            batch.add(self._make_scheduled(request, num_new))

    def _admit_static(self, batch: StepBatch, was_running: bool) -> None:
        """Static batching (an ablation): a batch forms from what is waiting, possibly over several
        steps when its prompts exceed one step's token budget, and then admits nobody until all of
        its requests finish, like padded `generate` batches."""
        if not was_running:
            self._static_batch_open = True
        if not self._static_batch_open or batch.preempted:
            return
        self._admit(batch)
        # Sealed once admission stops for any reason but this step's token budget (or batch share).
        if not batch.is_full or not self.waiting or len(self.running) >= self.config.max_num_seqs:
            self._static_batch_open = False

    # ---- the slice of a request one step computes ------------------------------------------

    def _cap(self, num_new: int, budget: int) -> int:
        threshold = self.config.long_prefill_token_threshold
        # The long-prefill cap is a chunking knob: with chunking off prompts go whole.
        if self.config.enable_chunked_prefill and 0 < threshold < num_new:
            num_new = threshold
        return min(num_new, budget)

    def _make_scheduled(self, request: Request, num_new: int) -> ScheduledRequest:
        return scheduled_request(request, num_new, self.kv_cache_manager.get_block_ids(request))

    # ---- results -------------------------------------------------------------------------

    def update_from_output(
        self, scheduler_output: SchedulerOutput, model_runner_output: ModelRunnerOutput
    ) -> list[tuple[Request, list[int]]]:
        results: list[tuple[Request, list[int]]] = []
        finished_any = False
        if self.in_flight and scheduler_output.requests:
            self._land(scheduler_output)
        for sched in scheduler_output.requests:
            request = self.requests.get(sched.req_id)
            # Aborted or preempted since it was scheduled: its work no longer applies.
            if (
                request is None
                or request.status != RequestStatus.RUNNING
                or request.num_computed_tokens != sched.start_pos
            ):
                continue
            request.num_computed_tokens = sched.end_pos
            self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens)
            if not sched.sample or sched.req_id not in model_runner_output.sampled_token_ids:
                continue
            token = model_runner_output.sampled_token_ids[sched.req_id]
            request.output_token_ids.append(token)
            if request.timestamps.first_token is None:
                request.timestamps.first_token = self.clock()
            status = check_stop(request, token, self.max_model_len)
            if status is not None:
                self._finish(request, status)
                finished_any = True
            results.append((request, [token]))
        if finished_any:
            self.running = [r for r in self.running if not r.is_finished()]
        return results

    def _land(self, scheduler_output: SchedulerOutput) -> None:
        """The batch's output arrived: its requests may be scheduled again (batch queue only)."""
        step_id = scheduler_output.step_id
        assert step_id == min(self.in_flight.values()), (
            f"batch {step_id} landed before batch {min(self.in_flight.values())}: outputs must land in order"
        )
        for sched in scheduler_output.requests:
            assert self.in_flight.pop(sched.req_id, None) == step_id, f"{sched.req_id} was not in batch {step_id}"
            aborted = self._free_on_landing.pop(sched.req_id, None)
            if aborted is not None:
                self.kv_cache_manager.free(aborted)

    def _finish(self, request: Request, status: RequestStatus) -> None:
        """Mark finished and free; the caller takes it out of `running`/`waiting`."""
        request.status = status
        request.timestamps.finished = self.clock()
        if request.request_id in self.in_flight:  # a stage may still write its blocks: free on landing
            self._free_on_landing[request.request_id] = request
        else:
            self.kv_cache_manager.free(request)
        self.requests.pop(request.request_id, None)
        self._finished_since_last_step.add(request.request_id)

    def finish_requests(self, req_ids: str | Iterable[str], status: RequestStatus) -> list[Request]:
        """Abort or stop requests wherever they are; unknown or finished ids are ignored."""
        assert status.finished, f"{status} is not a finished status"
        if isinstance(req_ids, str):
            req_ids = [req_ids]
        done = []
        for req_id in req_ids:
            request = self.requests.get(req_id)
            if request is None or request.is_finished():
                continue
            if request.status == RequestStatus.RUNNING:
                self.running.remove(request)
            else:
                self.waiting.remove(request)
            self._finish(request, status)
            done.append(request)
        return done

    # ---- introspection -------------------------------------------------------------------

    def has_unfinished_requests(self) -> bool:
        # A batch in flight must still land, even if all its requests were aborted meanwhile.
        return bool(self.running) or bool(self.waiting) or bool(self.in_flight)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def get_request(self, req_id: str) -> Request | None:
        """A request still waiting or running (finished ones are forgotten)."""
        return self.requests.get(req_id)

    def stats(self) -> SchedulerStats:
        kv = self.kv_cache_manager
        return SchedulerStats(
            num_running=self.num_running,
            num_waiting=self.num_waiting,
            kv_usage=kv.usage,
            num_preemptions_total=self.num_preemptions_total,
            prefix_cache_queries=kv.prefix_cache_queries,
            prefix_cache_hits=kv.prefix_cache_hits,
            num_blocks_total=kv.num_blocks,
            num_free_blocks=kv.get_num_free_blocks(),
        )
