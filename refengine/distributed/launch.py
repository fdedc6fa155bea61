"""Starting the ranks: spawned on one machine, or already started by torchrun across machines.

One machine: the driver process (rank 0, which also runs the scheduler and the server) opens a
TCPStore on a port the OS picks (port 0: nothing hard-coded, no race for a port) and spawns
ranks 1..N-1 with torch.multiprocessing ("spawn": CUDA-safe), passing the port. Each child
exits by itself if its parent goes away (a parent killed with SIGKILL runs no cleanup).

torchrun: every process has RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; the
groups are joined with env://. Rank 0 runs the server; the others run `run_torchrun_worker`
(the server CLI does this when RANK is not 0). torchrun's agent tears down the job if a rank dies.

`RankWatchdog` waits on the children's process sentinels and reports a death within half a second.
"""

from __future__ import annotations

import datetime
import logging
import multiprocessing.connection
import os
import signal
import sys
import threading
import time

import torch.distributed as dist
import torch.multiprocessing as mp

from refengine.device import resolve_device_setup
from refengine.distributed.parallel_state import destroy_process_groups, init_process_groups
from refengine.distributed.worker import WorkerSpec, build_runner, kv_blocks_for, set_cpu_threads, worker_loop
from refengine.errors import RefEngineError
from refengine.gc_heap import freeze_startup_heap
from refengine.model.hf_config import load_model_config
from refengine.model.tiny import resolve_model
from refengine.parallel.layout import ParallelConfig, validate_layout

log = logging.getLogger(__name__)


def torchrun_env() -> tuple[int, int] | None:
    """(rank, world_size) when started by torchrun (or any env:// launcher), else None."""
    if all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return None


def local_world_size(pc: ParallelConfig) -> int:
    return int(os.environ.get("LOCAL_WORLD_SIZE", pc.world_size))


def _exit_with_parent(parent_pid: int) -> None:
    def watch():
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _run_rank(rank: int, spec: WorkerSpec, model_config, pc: ParallelConfig, backend: str, store) -> None:
    # Ctrl-C reaches the whole process group (and torchrun forwards it): the driver drains and then
    # tells the workers to stop, so a worker must not die on SIGINT mid-step.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if spec.device_type == "cpu":
        set_cpu_threads(local_world_size(pc))
    groups = init_process_groups(pc, rank, store, backend, spec.device_type)
    try:
        runner = build_runner(spec, model_config, pc, groups)
        dist.barrier(group=groups.control)  # "loaded": the driver starts serving after this
        # A rank's collection pause stalls every rank at the next collective (refengine/gc_heap.py).
        freeze_startup_heap(f"rank {rank}")
        worker_loop(runner, groups)
    except RuntimeError as exc:  # a peer died or timed out: say so in one line and exit non-zero
        print(f"refengine rank {rank}: stopping, a collective failed: {str(exc).splitlines()[0]}", file=sys.stderr)
        os._exit(1)
    destroy_process_groups()


def _child_main(
    rank: int, port: int, spec: WorkerSpec, model_config, pc: ParallelConfig, backend: str, parent_pid: int
) -> None:
    os.environ["LOCAL_RANK"] = str(rank)
    logging.basicConfig(level=logging.WARNING)
    _exit_with_parent(parent_pid)
    store = dist.TCPStore(
        "127.0.0.1", port, pc.world_size, is_master=False, timeout=datetime.timedelta(seconds=max(60.0, pc.timeout_s))
    )
    _run_rank(rank, spec, model_config, pc, backend, store)


def spawn_local_ranks(spec: WorkerSpec, model_config, pc: ParallelConfig, backend: str):
    """Open the store and start ranks 1..N-1 on this machine; returns (store, processes)."""
    if os.path.exists("/sys/class/net/lo"):
        # All ranks are local: keep gloo's connections on loopback (the children inherit this).
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    store = dist.TCPStore(
        "127.0.0.1",
        0,
        pc.world_size,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=max(60.0, pc.timeout_s)),
    )
    ctx = mp.get_context("spawn")
    procs = []
    for rank in range(1, pc.world_size):
        p = ctx.Process(
            target=_child_main,
            name=f"refengine-rank{rank}",
            daemon=True,
            args=(rank, store.port, spec, model_config, pc, backend, os.getpid()),
        )
        p.start()
        procs.append(p)
    return store, procs


def run_torchrun_worker(args) -> int:
    """Entry for torchrun ranks other than 0: build this rank's part and serve the driver's steps."""
    env = torchrun_env()
    if env is None:
        raise RefEngineError("a torchrun worker needs torchrun's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT")
    rank, world = env
    # The same resolution as LLMEngine's, so every rank agrees on weights, KV dtype, block count and schedule.
    model_dir = resolve_model(args.model)
    setup = resolve_device_setup(args, model_dir)
    pc = ParallelConfig.from_engine_args(args, setup.device.type)
    if world != pc.world_size:
        raise RefEngineError(
            f"torchrun started {world} processes but tensor_parallel_size x pipeline_parallel_size "
            f"= {pc.world_size}; pass --nproc-per-node/--nnodes that multiply to {pc.world_size}"
        )
    model_config = load_model_config(model_dir)
    validate_layout(model_config, pc)
    spec = WorkerSpec(
        args,
        str(model_dir),
        setup.dtype,
        setup.device.type,
        kv_blocks_for(args, model_config, pc, setup.kv_cache_dtype),
        quant=setup.quant,
        kv_cache_dtype=setup.kv_cache_dtype,
    )
    _run_rank(rank, spec, model_config, pc, pc.resolve_backend(setup.device.type), None)
    return 0


class RankWatchdog:
    """Calls `on_death(message)` once, from a thread, when any watched process exits."""

    def __init__(self, procs, on_death):
        self.procs, self.on_death = list(procs), on_death
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rank-watchdog", daemon=True)

    def start(self) -> None:
        if self.procs:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        by_sentinel = {p.sentinel: i + 1 for i, p in enumerate(self.procs)}
        while not self._stop.is_set():
            ready = multiprocessing.connection.wait(list(by_sentinel), timeout=0.5)
            if ready and not self._stop.is_set():
                proc = self.procs[by_sentinel[ready[0]] - 1]
                proc.join(0.1)
                self.on_death(f"rank {by_sentinel[ready[0]]} (pid {proc.pid}) exited with code {proc.exitcode}")
                return
