"""CPU time per process, grouped by who the process is: the server under test, the load generator,
or someone else on this host.

The P99 diagnosis must tell a compute-bound engine (saturation: the server's own threads take the
cores) from a noisy neighbour (another process takes them) and from the load generator itself. So
every sample reads /proc/<pid>/stat of every process, takes each one's CPU ticks since the last
sample, and sums them into three groups:

- server: the server's pid and its descendants (TP workers, tokenizer processes);
- client: the given client pids and their descendants; by default the process running the probe
  (the sweep) and its descendants (the locust processes) minus the server's tree, because an
  embedded server is also a child of the sweep;
- others: every other process; the busiest few are named (pid, comm, cores).

A process that appeared since the last sample is counted from its start time, not from zero, so
a short-lived burner that started mid-interval still shows; a process that exited between two
samples is lost (its ticks are not readable any more) — at 1 s sampling that is small.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from probes import procfs

TOP_OTHERS = 10  # busiest other processes named per sample
MIN_NAMED_CORES = 0.05  # ... when they take at least this share of a core


@dataclass
class ProcSample:
    pid: int
    ppid: int
    comm: str
    ticks: int  # utime + stime
    start_ticks: int | None  # starttime since boot, ticks (to count a new process from its start)


@dataclass
class CpuByProcess:
    """One interval's CPU, in cores (1.0 = one core busy the whole interval)."""

    server_cpu_cores: float | None
    client_cpu_cores: float
    others_cpu_cores: float
    top_others: list[dict]  # [{pid, comm, cpu_cores}], busiest first


def read_processes(proc: Path) -> dict[int, ProcSample]:
    out: dict[int, ProcSample] = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(proc / name / "stat", encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            continue  # exited while we listed
        st = procfs.parse_pid_stat(text)
        if st is None:
            continue
        out[int(name)] = ProcSample(int(name), st["ppid"], st["comm"], st["utime"] + st["stime"], _start(text))
    return out


def _start(text: str) -> int | None:
    f = text.rpartition(")")[2].split()
    try:
        return int(f[19])  # field 22: starttime
    except (IndexError, ValueError):
        return None


def descendants(roots: set[int], procs: dict[int, ProcSample]) -> set[int]:
    """`roots` and every process below them in the parent tree."""
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = set(), [r for r in roots]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.add(pid)
        todo.extend(children.get(pid, []))
    return out


class ProcessCpuTracker:
    def __init__(
        self,
        proc: Path,
        server_pid: int | None,
        client_pids: list[int] | None,
        tick_hz: int,
        replica_pids: list[int] | None = None,
    ):
        self.proc = proc
        self.server_pid = server_pid
        # The server's roots: its process and any other local replica of a fleet driven directly.
        self.server_roots = {server_pid, *(replica_pids or [])} if server_pid else set(replica_pids or [])
        self.client_roots = set(client_pids) if client_pids else {os.getpid()}
        self.tick_hz = tick_hz
        self._prev: dict[int, int] | None = None
        self.client_pids: frozenset[int] = frozenset()  # the load generator's processes at the last sample
        self.procs: dict[int, ProcSample] | None = None  # every process at the last sample (their tree)
        self._boot_ticks_prev: float | None = None

    def sample(self, dt_s: float, uptime_s: float | None) -> CpuByProcess | None:
        procs = self.procs = read_processes(self.proc)
        prev, self._prev = self._prev, {p.pid: p.ticks for p in procs.values()}
        boot_prev, self._boot_ticks_prev = self._boot_ticks_prev, (uptime_s * self.tick_hz if uptime_s else None)
        server = descendants(self.server_roots, procs) if self.server_roots else set()
        client = descendants(self.client_roots, procs) - server
        self.client_pids = frozenset(client)
        if prev is None or dt_s <= 0:
            return None  # the first call only sets the baselines
        per_pid: dict[int, float] = {}
        for p in procs.values():
            if p.pid in prev:
                d = p.ticks - prev[p.pid]
            elif p.start_ticks is not None and boot_prev is not None and p.start_ticks >= boot_prev:
                d = p.ticks  # born during this interval: all its ticks are new
            else:
                continue  # pid reuse or unknown start: skip rather than over-count
            if d > 0:
                per_pid[p.pid] = d / self.tick_hz / dt_s
        server_cores = sum(v for pid, v in per_pid.items() if pid in server) if self.server_roots else None
        client_cores = sum(v for pid, v in per_pid.items() if pid in client)
        others = {pid: v for pid, v in per_pid.items() if pid not in server and pid not in client}
        top = sorted(others.items(), key=lambda kv: -kv[1])[:TOP_OTHERS]
        return CpuByProcess(
            None if server_cores is None else round(server_cores, 4),
            round(client_cores, 4),
            round(sum(others.values()), 4),
            [{"pid": pid, "comm": procs[pid].comm, "cpu_cores": round(v, 3)} for pid, v in top if v >= MIN_NAMED_CORES],
        )
