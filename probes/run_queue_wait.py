"""Run-queue wait from the threads' own accounts: of the time a process's threads were runnable, the
share they waited for a CPU (/proc/<pid>/task/<tid>/schedstat), between two readings.

The host probe reads it for the server, the load generator and, for a fleet driven URL by URL on
this host, each replica's own process tree (ReplicaWait): a neighbour pinned to one replica's cores
starves that replica alone, which neither the host-wide counters nor the first replica's wait can
say (docs/probes.md; analyzers/triage/fleet/own_cores.py reads it).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from probes import procfs
from probes.base import read_text
from probes.proc_cpu import ProcSample, descendants

Reading = tuple[float, int, int]  # (monotonic s, ns on a CPU, ns runnable but waiting)


def sched_ns(bases: list[Path]) -> tuple[int, int] | None:
    """(run ns, wait ns) summed over the threads of these processes; None when none could be read
    (a thread that exited since the last reading takes its counts with it: a small undercount)."""
    run_ns = wait_ns = 0
    read = False
    for base in bases:
        try:
            tasks = os.listdir(base / "task")
        except OSError:
            continue
        for tid in tasks:
            try:
                got = procfs.parse_schedstat(read_text(base / "task" / tid / "schedstat"))
            except OSError:
                continue  # exited while we listed, or no schedstats in this kernel
            if got is not None:
                run_ns, wait_ns, read = run_ns + got[0], wait_ns + got[1], True
    return (run_ns, wait_ns) if read else None


def wait_between(prev: Reading | None, now: Reading) -> dict[str, float]:
    """`cpu_wait_cores` (threads waiting, on average) and `cpu_wait_share` (of their runnable time, the
    share spent waiting on a run queue) between two readings; empty without an earlier one."""
    if prev is None or now[0] <= prev[0]:
        return {}
    d_run, d_wait = max(now[1] - prev[1], 0), max(now[2] - prev[2], 0)
    out = {"cpu_wait_cores": round(d_wait / 1e9 / (now[0] - prev[0]), 4)}
    if d_run + d_wait > 0:
        out["cpu_wait_share"] = round(d_wait / (d_run + d_wait), 4)
    return out


class ReplicaWait:
    """Each local replica's run-queue wait, its process and descendants (an engine core process, TP
    workers), by the replica's name as the records give it (its index in the target's URLs)."""

    def __init__(self, proc: Path, pids: dict[str, int]):
        self.proc, self.pids = proc, dict(pids)
        self._prev: dict[str, Reading] = {}

    def sample(self, procs: dict[int, ProcSample] | None) -> dict[str, dict[str, float]]:
        now = time.monotonic()
        out: dict[str, dict[str, float]] = {}
        for name, pid in self.pids.items():
            tree = descendants({pid}, procs) if procs else {pid}
            counts = sched_ns([self.proc / str(p) for p in sorted(tree)])
            if counts is None:
                continue  # gone: nothing to say for it
            prev, self._prev[name] = self._prev.get(name), (now, *counts)
            fields = wait_between(prev, self._prev[name])
            if fields:
                out[name] = fields
        return out
