"""The executor: what the engine calls to run a step, on one process or on all the ranks.

`UniprocExecutor` is the ModelRunner of a one-process engine. `DistributedExecutor` is the driver
(rank 0): it starts or joins the other ranks, builds its own part of the model, and for each
step sends the SchedulerOutput to every rank on the control group, runs its own part, and returns the
tokens the sampler rank sent back. What crosses per step: the pickled SchedulerOutput (driver ->
all), activations between stages, TP collectives inside the layers, and one int64 tensor of
sampled tokens (sampler rank -> driver).

Failure: a rank that dies closes its sockets, so the next collective on any peer fails at once
(and a stuck rank trips the group timeout); a watchdog on spawned ranks also notices a death
while the engine is idle. Either way the executor turns unhealthy, stops the other ranks, and
every later step raises `RankFailedError` with the reason, which fails the engine loop (the
server's /health then answers 503).

Under the batch queue (`pipeline_schedule="batch-queue"`, PP > 1) the engine calls `submit`
(post the step to the ranks, run stage 0, return a PendingBatch at once) and later `collect`
(wait for that batch's tokens), oldest first; `execute_model` is submit + collect.
"""

from __future__ import annotations

import atexit
import logging
import time

import torch
import torch.distributed as dist

from refengine.core.outputs import ModelRunnerOutput, SchedulerOutput
from refengine.distributed.control_channel import ControlChannel, PostedMessage
from refengine.distributed.launch import RankWatchdog, local_world_size, spawn_local_ranks, torchrun_env
from refengine.distributed.parallel_state import destroy_process_groups, init_process_groups
from refengine.distributed.pipeline_runner import PendingBatch
from refengine.distributed.worker import WorkerSpec, build_runner, rank_stats, set_cpu_threads
from refengine.errors import RefEngineError
from refengine.parallel.layout import ParallelConfig

log = logging.getLogger(__name__)


class RankFailedError(RuntimeError):
    """A rank died or a collective failed; the distributed engine cannot continue."""


class UniprocExecutor:
    world_size = 1

    def __init__(self, runner):
        self.runner = runner
        self.dead_reason: str | None = None

    @property
    def healthy(self) -> bool:
        return True

    def execute_model(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        return self.runner.execute_model(sched)

    def collect_stats(self) -> list[dict]:
        return []

    def shutdown(self) -> None:
        pass


class DistributedExecutor:
    def __init__(self, spec: WorkerSpec, model_config, pc: ParallelConfig):
        self.pc = pc
        self.world_size = pc.world_size
        self.dead_reason: str | None = None
        self.procs = []
        self.step_wall_s = 0.0  # driver wall time with a batch in the pipeline (the bubble's denominator)
        self.steps = 0
        self._in_flight = 0  # batches submitted, not yet collected
        self._busy_since = 0.0
        self._unattached: list[
            PostedMessage
        ] = []  # control messages of empty batch-queue steps, waited with the next batch
        backend = pc.resolve_backend(spec.device_type)
        local = local_world_size(pc)
        if spec.device_type == "cuda" and torch.cuda.device_count() < local:
            raise RefEngineError(
                f"{local} ranks on this machine need {local} GPUs (one each) but "
                f"{torch.cuda.device_count()} are visible; lower the parallel sizes or run on CPU"
            )
        env = torchrun_env()
        if env is not None:
            rank, world = env
            if world != pc.world_size:
                raise RefEngineError(
                    f"torchrun started {world} processes but tensor_parallel_size x "
                    f"pipeline_parallel_size = {pc.world_size}"
                )
            if rank != 0:
                raise RefEngineError(f"rank {rank} is a worker; only rank 0 builds the engine")
            store = None
        else:
            store, self.procs = spawn_local_ranks(spec, model_config, pc, backend)
        self._threads_before = torch.get_num_threads()  # restored at shutdown: this process lives on
        if spec.device_type == "cpu":
            self.threads = set_cpu_threads(local_world_size(pc))
        self._closed = False
        atexit.register(self.shutdown)
        try:
            self.groups = init_process_groups(pc, 0, store, backend, spec.device_type)
            self.control = ControlChannel(self.groups.control, pc.world_size, 0)
            self.runner = build_runner(spec, model_config, pc, self.groups)
            dist.barrier(group=self.groups.control)
        except RuntimeError as exc:
            dead = [
                f"rank {i + 1} exited with code {p.exitcode}"
                for i, p in enumerate(self.procs)
                if p.exitcode is not None
            ]
            hint = (
                (
                    f" ({', '.join(dead)}; its error is printed above. A script that builds a parallel LLM needs "
                    "`if __name__ == '__main__':`, since ranks are spawned)"
                )
                if dead
                else ""
            )
            self._kill_ranks()
            self.shutdown()
            raise RankFailedError(f"the ranks did not start: {str(exc).splitlines()[0]}{hint}") from None
        except BaseException:
            self._kill_ranks()  # e.g. a RefEngineError while loading: stop the other ranks, then report it
            self.shutdown()
            raise
        self.watchdog = RankWatchdog(self.procs, self._on_rank_death)
        self.watchdog.start()

    # ----- health ---------------------------------------------------------------------------
    @property
    def healthy(self) -> bool:
        return self.dead_reason is None

    def _on_rank_death(self, message: str) -> None:
        if self.dead_reason is None and not self._closed:
            self.dead_reason = message
            log.error("distributed engine failed: %s", message)
            self._kill_ranks()

    def _fail(self, exc: BaseException) -> RankFailedError:
        # Give the watchdog a moment: its message (which rank, which exit code) says more.
        deadline = time.monotonic() + 1.0
        while self.dead_reason is None and self.procs and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.dead_reason is None:
            self.dead_reason = f"a collective failed: {str(exc).splitlines()[0]}"
        self._kill_ranks()
        return RankFailedError(f"the distributed engine failed: {self.dead_reason}")

    # ----- steps ----------------------------------------------------------------------------
    def _send(self, kind: str, payload=None) -> None:
        self.control.send(kind, payload)

    def _check_alive(self) -> None:
        if self.dead_reason is not None:
            raise RankFailedError(f"the distributed engine failed: {self.dead_reason}")

    def execute_model(self, sched: SchedulerOutput) -> ModelRunnerOutput:
        self._check_alive()
        t0 = time.perf_counter()
        try:
            self._send("step", sched)
            out = self.runner.execute_model(sched)
        except RuntimeError as exc:
            raise self._fail(exc) from None
        if not sched.is_empty:
            self.step_wall_s += time.perf_counter() - t0
            self.steps += 1
        return out

    def submit(self, sched: SchedulerOutput) -> PendingBatch | None:
        """Batch queue: start a batch through the pipeline without waiting for the last stage. An
        empty one (finished request ids only) is just told to the ranks: None, nothing to collect."""
        self._check_alive()
        try:
            posted = self.control.post("step", sched)
            if sched.is_empty:  # not waited here: a busy stage takes it after its current batch
                self._unattached.append(posted)
                return None
            if self._in_flight == 0:
                self._busy_since = time.perf_counter()
            self._in_flight += 1
            pending = self.runner.submit(sched)
        except RuntimeError as exc:
            raise self._fail(exc) from None
        for message in (*self._unattached, posted):
            pending.sends += message.works
            pending.buffers += message.buffers
        self._unattached = []
        return pending

    def collect(self, pending: PendingBatch) -> ModelRunnerOutput:
        """Batch queue: wait for a submitted batch's tokens (the oldest batch first)."""
        self._check_alive()
        try:
            out = self.runner.collect(pending)
        except RuntimeError as exc:
            raise self._fail(exc) from None
        self.steps += 1
        self._in_flight -= 1
        if self._in_flight == 0:  # the pipeline drained: the time since it filled counts as step time
            self.step_wall_s += time.perf_counter() - self._busy_since
        return out

    def _pipeline_wall_s(self) -> float:
        """step_wall_s including a batch still in flight (for a bubble read mid-run)."""
        extra = time.perf_counter() - self._busy_since if self._in_flight else 0.0
        return self.step_wall_s + extra

    def collect_stats(self) -> list[dict]:
        """Every rank's counters (rank order): steps, busy/wall seconds, comm seconds, MoE loads."""
        self._send("stats")
        gathered: list[dict | None] = [None] * self.world_size
        dist.gather_object(rank_stats(self.runner), gathered, dst=0, group=self.groups.control)
        return [stats for stats in gathered if stats is not None]  # gather_object fills every slot

    def enable_comm_timer(self, on: bool = True) -> None:
        from refengine.distributed.comm_timer import CommTimer

        self._send("comm_timer", on)
        CommTimer.enable(on)

    def measured_bubble(self, stats: list[dict] | None = None) -> float | None:
        """1 - (compute summed over stages) / (stages x driver step wall time), over all steps so far."""
        stats = stats if stats is not None else self.collect_stats()
        wall = self._pipeline_wall_s()
        if not wall:
            return None
        busy = sum(s["busy_s"] for s in stats if s["tp_rank"] == 0)  # one rank per stage
        return max(0.0, 1.0 - busy / (self.pc.pipeline_parallel_size * wall))

    # ----- shutdown -------------------------------------------------------------------------
    def _kill_ranks(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.kill()

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        if getattr(self, "watchdog", None) is not None:
            self.watchdog.stop()
        if self.dead_reason is None and getattr(self, "runner", None) is not None:
            try:
                self._send("shutdown")
            except RuntimeError:
                pass
        for p in self.procs:
            p.join(5)
        self._kill_ranks()
        destroy_process_groups()
        torch.set_num_threads(self._threads_before)
