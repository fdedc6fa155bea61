"""vLLM's batch queue: keep up to `depth` (= pipeline stages) scheduled batches in the pipeline.

One engine step: if fewer than `depth` batches are in flight, schedule a new one and submit it to
stage 0 without waiting for the last stage. Then block on the oldest batch only when the queue is
full or nothing new could be scheduled, and hand it back for `update_from_output`. So while the
last stage computes batch N, stage 0 already computes batch N + 1, and no stage waits for a step
to drain as the micro-batch schedule does at every step's end.

The scheduler (max_batches_in_flight = depth) skips requests whose batch is still in flight, since
their next token is unknown, never preempts them, and gives each batch a 1/depth share of the live
requests so that the batches in flight hold different requests (refengine/core/scheduler.py).
"""

from __future__ import annotations

from collections import deque

from refengine.core.outputs import ModelRunnerOutput, SchedulerOutput


class BatchQueue:
    def __init__(self, scheduler, executor, depth: int):
        assert depth > 1 and scheduler.max_batches_in_flight == depth
        self.scheduler, self.executor, self.depth = scheduler, executor, depth
        self.pending: deque = deque()  # PendingBatch, oldest first

    def __len__(self) -> int:
        return len(self.pending)

    def step(self) -> tuple[SchedulerOutput, ModelRunnerOutput] | None:
        """Submit a batch if there is room and work; return the oldest batch's output when it is time
        to wait for it, else None (the caller steps again)."""
        submitted = False
        if len(self.pending) < self.depth:
            sched = self.scheduler.schedule()
            if not sched.is_empty:
                self.pending.append(self.executor.submit(sched))
                submitted = True
            elif sched.finished_req_ids:
                self.executor.submit(sched)  # tells the ranks to drop finished requests; nothing to wait for
        if self.pending and (not submitted or len(self.pending) == self.depth):
            oldest = self.pending.popleft()
            return oldest.sched, self.executor.collect(oldest)
        assert bool(self.pending) == bool(self.scheduler.in_flight), "queue and scheduler disagree on what is in flight"
        return None
