"""The replicas of a data-parallel fleet: N full refengine servers, each its own process on its
own loopback port, started, watched and stopped by the front (`refengine/server/dp_front.py`).

Each replica is `python -m refengine.server` with the user's own arguments and three overrides
appended (argparse keeps the last occurrence of a flag): its port, 127.0.0.1, and
--data-parallel-size 1. So every engine and server flag means in a replica what it means for a
single server, and nothing is parsed twice. A replica gets its share of the CPU cores as torch
threads unless OMP_NUM_THREADS says otherwise (N replicas that each take every core only fight),
its own cores (a slice of the front's CPU affinity, as vLLM's CPU backend binds each data-parallel
rank's threads to cores of its own) when there are at least as many cores as replicas, and its own
GPUs (TP x PP of them) through CUDA_VISIBLE_DEVICES when there are enough.
On Linux a replica dies with its front (PR_SET_PDEATHSIG), so a killed front leaves no orphans.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from refengine.errors import RefEngineError

_PR_SET_PDEATHSIG = 1


def free_loopback_port() -> int:
    """A port nothing listens on right now (refengine imports nothing of the project's, so not rundir's)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux/glibc: the front's own shutdown still stops its replicas


@dataclass
class Replica:
    index: int
    port: int
    proc: subprocess.Popen | None = None

    def __post_init__(self) -> None:
        if self.index < 0 or not 0 < self.port < 65536:
            raise ValueError(f"replica index {self.index} / port {self.port} out of range")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def health_ok(self, timeout_s: float = 1.0) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=timeout_s) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False


def visible_gpus(env: dict[str, str], device: str) -> list[str]:
    """The GPUs the fleet may share out: CUDA_VISIBLE_DEVICES's list, else every GPU torch sees
    (torch is imported only when the engine may use CUDA); none on CPU."""
    if device == "cpu":
        return []
    if "CUDA_VISIBLE_DEVICES" in env:
        return [d.strip() for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def gpu_slices(size: int, per_replica: int, visible: list[str]) -> list[str | None]:
    """Each replica's CUDA_VISIBLE_DEVICES: its own consecutive `per_replica` GPUs (TP x PP of one
    replica), as vLLM gives each data-parallel rank its own; None for all (they see what the front
    sees) when there are no GPUs or too few for every replica to have its own."""
    if per_replica < 1:
        raise ValueError(f"a replica uses at least one device, got {per_replica}")
    if len(visible) < size * per_replica:
        return [None] * size
    return [",".join(visible[i * per_replica : (i + 1) * per_replica]) for i in range(size)]


def front_cores() -> list[int]:
    """The cores the front may run on (its affinity, e.g. under `taskset`), in order."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def cpu_slices(size: int, cores: list[int]) -> list[frozenset[int] | None]:
    """Each replica's own consecutive share of `cores` (the remainder goes unused rather than making
    one replica bigger); None for all (they share what the front has) with fewer cores than replicas.
    Two replicas whose threads migrate over the same cores only slow each other, and a replica's
    latency should be its own when a fleet is diagnosed replica by replica."""
    if size < 1:
        raise ValueError(f"a fleet has at least one replica, got {size}")
    per_replica = len(cores) // size
    if per_replica < 1:
        return [None] * size
    return [frozenset(cores[i * per_replica : (i + 1) * per_replica]) for i in range(size)]


def replica_threads(size: int, env: dict[str, str], cores: frozenset[int] | None = None) -> str | None:
    """torch threads per replica: the user's OMP_NUM_THREADS, else its own cores, else the cores shared out."""
    if "OMP_NUM_THREADS" in env:
        return None
    if cores:
        return str(len(cores))
    return str(max(1, (os.cpu_count() or 1) // size))


def _child_setup(cores: frozenset[int] | None):
    """What runs in a replica between fork and exec: die with the front; stay on its own cores."""

    def setup() -> None:
        if sys.platform.startswith("linux"):
            _die_with_parent()
        if cores and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, cores)

    return setup


class ReplicaSet:
    """N replica processes: start them together, wait until all are healthy, stop them."""

    def __init__(
        self,
        size: int,
        server_argv: list[str],
        gpus: list[str | None] | None = None,
        cpus: list[frozenset[int] | None] | None = None,
    ):
        if size < 1:
            raise RefEngineError(f"--data-parallel-size must be >= 1, got {size}")
        self.server_argv = list(server_argv)
        self.replicas = [Replica(i, free_loopback_port()) for i in range(size)]
        self.gpus = gpus or [None] * size  # each replica's CUDA_VISIBLE_DEVICES (None: inherited)
        self.cpus = cpus or [None] * size  # each replica's cores (None: the front's)
        if len(self.gpus) != size or len(self.cpus) != size:
            raise ValueError(f"{len(self.gpus)} GPU slices and {len(self.cpus)} core slices for {size} replicas")

    def command(self, replica: Replica) -> list[str]:
        return [
            sys.executable,
            "-m",
            "refengine.server",
            *self.server_argv,
            "--host",
            "127.0.0.1",
            "--port",
            str(replica.port),
            "--data-parallel-size",
            "1",
        ]

    def start(self, timeout_s: float) -> None:
        """Every replica healthy, or RefEngineError (exit 2 from a replica: a user mistake) after
        stopping them all."""
        env = os.environ.copy()
        for r, gpus, cores in zip(self.replicas, self.gpus, self.cpus):
            mine = dict(env)
            threads = replica_threads(len(self.replicas), env, cores)
            if threads is not None:
                mine["OMP_NUM_THREADS"] = threads
            if gpus is not None:
                mine["CUDA_VISIBLE_DEVICES"] = gpus
            r.proc = subprocess.Popen(self.command(r), env=mine, preexec_fn=_child_setup(cores))
        try:
            self._wait_healthy(timeout_s)
        except BaseException:
            self.stop(grace_s=2.0)
            raise

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        pending = list(self.replicas)
        while pending:
            for r in list(pending):
                assert r.proc is not None
                if r.proc.poll() is not None:
                    raise ReplicaStartError(r.index, r.proc.returncode)
                if r.health_ok():
                    pending.remove(r)
            if pending and time.monotonic() > deadline:
                raise RefEngineError(f"replicas {[r.index for r in pending]} were not healthy after {timeout_s:.0f} s")
            if pending:
                time.sleep(0.2)

    def stop(self, grace_s: float) -> None:
        """SIGTERM to each (they drain in-flight requests), then SIGKILL after `grace_s`."""
        live = [r for r in self.replicas if r.alive()]
        for r in live:
            assert r.proc is not None
            r.proc.terminate()
        deadline = time.monotonic() + grace_s
        for r in live:
            assert r.proc is not None
            try:
                r.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                r.proc.kill()
                r.proc.wait()


class ReplicaStartError(RefEngineError):
    """A replica exited while the fleet started; its own error is already on stderr."""

    def __init__(self, index: int, returncode: int | None):
        self.returncode = returncode
        super().__init__(f"replica {index} exited with status {returncode} while starting (its error is above)")
