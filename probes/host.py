"""`host` probe: per-core CPU, memory, load, and the server process's CPU, RSS and NUMA placement.

Row fields (see docs/probes.md): cpu_pct (all cores, 0-100), cpu_per_core_pct (list, 0-100 each),
load1/load5/load15, mem_total_bytes, mem_available_bytes, mem_used_bytes, and when the server is
local: server_pid, server_cpu_cores (1.0 = one core busy), server_rss_bytes, server_threads,
server_last_cpu, server_numa_node (node of the CPU it last ran on), server_cpus_allowed,
server_mems_allowed, server_mem_by_node_bytes (every 30th sample; numa_maps is costly to read).

CPU by process (probes/proc_cpu.py): server_cpu_cores (the server and its descendants),
client_cpu_cores (the load generator: ctx.client_pids and their descendants, by default this
process, the sweep, and its locust children), others_cpu_cores (every other process) and
top_others ([{pid, comm, cpu_cores}], the busiest others). Contention: cpu_pressure_some_avg10
(PSI, % of the last 10 s some runnable task waited for a CPU), cpu_pressure_some_share (the same
over this interval, from the `total` deltas) and cpu_steal_pct (time a hypervisor took), where the
kernel has them. The server's own view of contention: server_cpu_wait_share (of the time its
threads were runnable, the share they waited for a CPU: /proc/<pid>/task/*/schedstat) and
server_cpu_wait_cores (threads waiting, on average), so a neighbour is told by what the target
itself lived through, not only by host-wide counters. For a fleet driven URL by URL on this host,
per_replica: {replica: {cpu_wait_share, cpu_wait_cores}} for each replica's own process tree, by its
index in the target's URLs (probes/run_queue_wait.py).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from probes import procfs
from probes.base import Probe, ProbeUnavailable, read_text
from probes.proc_cpu import ProcessCpuTracker
from probes.run_queue_wait import Reading, ReplicaWait, sched_ns, wait_between

NUMA_MAPS_EVERY = 30


class HostProbe(Probe):
    name = "host"

    def __init__(self, ctx, proc: str = "/proc", sys_root: str = "/sys"):
        super().__init__(ctx)
        self.proc = Path(proc)
        self.sys_root = Path(sys_root)
        self.pid = ctx.server_pid
        self._prev_cpus: dict | None = None
        self._prev_proc: tuple[float, int] | None = None  # (monotonic, utime+stime ticks)
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._node_of_cpu: dict[int, str] = {}
        self._n = 0
        self._pid_gone = False
        self._procs = ProcessCpuTracker(
            self.proc,
            self.pid,
            getattr(ctx, "client_pids", None),
            self._tick,
            list((getattr(ctx, "replica_pids", None) or {}).values()),
        )
        # A fleet driven URL by URL on this host: each replica's own wait, the first URL's (the server
        # pid) included, so a neighbour on one replica's cores is told apart (run_queue_wait.py).
        others = dict(getattr(ctx, "replica_pids", None) or {})
        self._replicas = ReplicaWait(self.proc, {"0": self.pid, **others}) if others and self.pid else None
        self._prev_t: float | None = None
        self._prev_psi: float | None = None
        self._prev_steal: tuple[int, int] | None = None
        self._prev_sched: Reading | None = None  # (monotonic, run ns, wait ns) of the server
        self._prev_client_sched: Reading | None = None  # ... of the load generator

    def check(self) -> None:
        if not sys.platform.startswith("linux"):
            raise ProbeUnavailable(f"needs Linux /proc (this is {sys.platform})")
        try:
            read_text(self.proc / "stat")
        except OSError as exc:
            raise ProbeUnavailable(f"cannot read {self.proc / 'stat'}: {exc.strerror or exc}") from None
        self._node_of_cpu = self._numa_nodes()
        if self.pid is not None:
            self._server({})  # baseline of the server's CPU ticks
        self._contention({}, 0.0)  # baselines of the per-process ticks, PSI and steal

    def _numa_nodes(self) -> dict[int, str]:
        out: dict[int, str] = {}
        base = self.sys_root / "devices/system/node"
        try:
            nodes = sorted(p for p in base.iterdir() if p.name.startswith("node") and p.name[4:].isdigit())
        except OSError:
            return out
        for node in nodes:
            try:
                for cpu in procfs.parse_cpulist(read_text(node / "cpulist")):
                    out[cpu] = node.name[4:]
            except OSError:
                continue
        return out

    def sample(self) -> dict | None:
        row: dict = {"t": time.time()}
        stat = read_text(self.proc / "stat")
        cpus = procfs.parse_proc_stat_cpus(stat)
        if self._prev_cpus is not None:
            pct = procfs.cpu_busy_pct(self._prev_cpus, cpus)
            row["cpu_pct"] = pct.get("cpu")
            cores = sorted((k for k in pct if k != "cpu"), key=lambda k: int(k[3:]) if k[3:].isdigit() else -1)
            row["cpu_per_core_pct"] = [pct[k] for k in cores]
        self._prev_cpus = cpus
        if "cpu_pct" not in row:
            return None  # the first sample only sets the baselines
        self._memory(row)
        if self.pid is not None and not self._pid_gone:
            self._server(row)
        self._contention(row, row["t"] - self._prev_t if self._prev_t else 0.0, stat)
        self._n += 1
        return row

    def _contention(self, row: dict, dt_s: float, stat: str | None = None) -> None:
        """Per-process CPU, PSI and steal for the interval since the last call (baselines when dt_s is 0)."""
        now = time.time()
        self._prev_t = now
        try:
            uptime = float(read_text(self.proc / "uptime").split()[0])
        except (OSError, ValueError, IndexError):
            uptime = None
        by_proc = self._procs.sample(dt_s, uptime)
        if by_proc is not None:
            if by_proc.server_cpu_cores is not None and not self._pid_gone:
                row["server_cpu_cores"] = by_proc.server_cpu_cores  # the server's whole process tree
            row["client_cpu_cores"] = by_proc.client_cpu_cores
            row["others_cpu_cores"] = by_proc.others_cpu_cores
            row["top_others"] = by_proc.top_others
        if self._procs.client_pids:
            self._client_wait(row, self._procs.client_pids)
        if self._replicas is not None:
            per_replica = self._replicas.sample(self._procs.procs)
            if per_replica and dt_s > 0:
                row["per_replica"] = per_replica
        try:
            psi = procfs.parse_pressure(read_text(self.proc / "pressure/cpu"))
        except OSError:
            psi = {}  # kernels without PSI (or containers that hide it)
        if "some_avg10" in psi:
            row["cpu_pressure_some_avg10"] = psi["some_avg10"]
        total = psi.get("some_total_us")
        if total is not None and self._prev_psi is not None and dt_s > 0:
            row["cpu_pressure_some_share"] = round(min(max((total - self._prev_psi) / (dt_s * 1e6), 0.0), 1.0), 4)
        self._prev_psi = total
        steal = procfs.parse_proc_stat_steal(stat) if stat else None
        if steal is not None and self._prev_steal is not None and steal[1] > self._prev_steal[1]:
            row["cpu_steal_pct"] = round(100.0 * (steal[0] - self._prev_steal[0]) / (steal[1] - self._prev_steal[1]), 3)
        if steal is not None:
            self._prev_steal = steal

    def _server_wait(self, row: dict, base: Path, now: float) -> None:
        """The server's threads: time on a CPU and time runnable but waiting, since the last sample
        (a thread that exited in between takes its counts with it: a small undercount)."""
        counts = sched_ns([base])
        if counts is None:
            return
        prev, self._prev_sched = self._prev_sched, (now, *counts)
        _wait_fields(row, "server", prev, self._prev_sched)

    def _client_wait(self, row: dict, pids: frozenset[int]) -> None:
        """The load generator's threads, the same way: a client that waited for a CPU read its streams
        late (analyzers/bursts.py tells a client that fell behind from a server that sent in bursts)."""
        now = time.monotonic()
        counts = sched_ns([self.proc / str(pid) for pid in sorted(pids)])
        if counts is None:
            return
        prev, self._prev_client_sched = self._prev_client_sched, (now, *counts)
        _wait_fields(row, "client", prev, self._prev_client_sched)

    def _memory(self, row: dict) -> None:
        try:
            mem = procfs.parse_meminfo(read_text(self.proc / "meminfo"))
            row["mem_total_bytes"] = mem.get("MemTotal")
            row["mem_available_bytes"] = mem.get("MemAvailable")
            if "MemTotal" in mem and "MemAvailable" in mem:
                row["mem_used_bytes"] = mem["MemTotal"] - mem["MemAvailable"]
            load = procfs.parse_loadavg(read_text(self.proc / "loadavg"))
            if load:
                row["load1"], row["load5"], row["load15"] = load
        except OSError as exc:
            row["mem_error"] = f"cannot read memory/load: {exc.strerror or exc}"

    def _server(self, row: dict) -> None:
        base = self.proc / str(self.pid)
        try:
            st = procfs.parse_pid_stat(read_text(base / "stat"))
        except OSError:
            self._pid_gone = True  # the server exited; say so once in the series
            row["server_gone"] = True
            return
        if st is None:
            return
        now = time.monotonic()
        ticks = st["utime"] + st["stime"]
        row["server_pid"] = self.pid
        if self._prev_proc is not None and now > self._prev_proc[0]:
            row["server_cpu_cores"] = round((ticks - self._prev_proc[1]) / self._tick / (now - self._prev_proc[0]), 4)
        self._prev_proc = (now, ticks)
        self._server_wait(row, base, now)
        row["server_rss_bytes"] = st["rss_pages"] * self._page
        row["server_threads"] = st["num_threads"]
        row["server_last_cpu"] = st["last_cpu"]
        if self._node_of_cpu:
            row["server_numa_node"] = self._node_of_cpu.get(st["last_cpu"])
        if self._n % NUMA_MAPS_EVERY == 0:
            try:
                lists = procfs.parse_status_lists(read_text(base / "status"))
                row["server_cpus_allowed"] = lists.get("Cpus_allowed_list")
                row["server_mems_allowed"] = lists.get("Mems_allowed_list")
                if self._node_of_cpu:
                    row["server_mem_by_node_bytes"] = procfs.parse_numa_maps(read_text(base / "numa_maps"), self._page)
            except OSError:
                pass  # numa_maps needs ptrace rights on another user's process: keep the rest


def _wait_fields(row: dict, who: str, prev: Reading | None, now: Reading) -> None:
    """`{who}_cpu_wait_cores` and `{who}_cpu_wait_share` between two readings (run_queue_wait.py)."""
    row.update({f"{who}_{k}": v for k, v in wait_between(prev, now).items()})
