"""Who runs where, for the benchmarks that put a server and a client side by side: core lists
(taskset syntax), pinning this process, a watch that records where each process actually ran (the
evidence the pinning held), and the host facts printed above a table (CPU model, a measured float32
matmul rate, the load average).
"""

from __future__ import annotations

import os
import threading

import psutil
from common import machine, matmul_peak

MATMUL_SHAPE = (256, 1024, 1024)  # M, N, K: ~0.5 GFLOP a call, many calls in a second


def parse_cores(text: str) -> list[int]:
    """ "1", "0,2" or "0-3,6" -> sorted core numbers."""
    cores: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        cores.update(range(int(lo), int(hi or lo) + 1))
    return sorted(cores)


def core_list(cores: list[int]) -> str:
    return ",".join(map(str, cores))


def check_cores(server: list[int], client: list[int]) -> str | None:
    """None when both sets are non-empty, on this machine (this process may run there) and disjoint."""
    have = os.sched_getaffinity(0)
    for name, cores in (("--server-cores", server), ("--client-cores", client)):
        if not cores or not set(cores) <= have:
            return f"{name} {core_list(cores)}: not among this machine's cores {core_list(sorted(have))}"
    if set(server) & set(client):
        return f"--server-cores {core_list(server)} and --client-cores {core_list(client)} overlap"
    return None


def pin_this_process(cores: list[int]) -> None:
    """Every thread of this process onto `cores` (sched_setaffinity(0) moves only the calling
    thread); processes started from here on inherit it."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except ProcessLookupError:
            pass  # a thread that ended meanwhile


class CoreWatch:
    """Samples, every `interval_s` while a run lasts, the cores each descendant of this process may
    run on (affinity) and last ran on (psutil cpu_num), split into the server's process trees and
    the client (this process and the rest): the evidence that the pinning held."""

    def __init__(self, server_pids: list[int], interval_s: float = 1.0):
        self.server_pids, self.interval_s = server_pids, interval_s
        self.seen = {side: {"allowed": set(), "ran_on": set()} for side in ("server", "client")}
        self.max_client_procs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "CoreWatch":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = psutil.Process()
        while True:
            self._sample(me)
            if self._stop.wait(self.interval_s):
                break

    def _sample(self, me: psutil.Process) -> None:
        server: set[int] = set()
        for pid in self.server_pids:
            try:
                server |= {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
            except psutil.Error:
                pass
        client_procs = 0
        for p in [me, *me.children(recursive=True)]:
            try:
                allowed, ran_on = p.cpu_affinity(), p.cpu_num()
            except psutil.Error:
                continue  # exited between the listing and the read
            side = "server" if p.pid in server else "client"
            self.seen[side]["allowed"].update(allowed)
            self.seen[side]["ran_on"].add(ran_on)
            client_procs += side == "client" and p.pid != me.pid
        self.max_client_procs = max(self.max_client_procs, client_procs)

    def as_dict(self) -> dict:
        out: dict = {side: {k: sorted(v) for k, v in d.items()} for side, d in self.seen.items()}
        out["client"]["max_procs"] = self.max_client_procs  # not counting this process
        return out


def merge_cores(a: dict | None, b: dict) -> dict:
    if a is None:
        return b
    out = {side: {k: sorted(set(a[side][k]) | set(b[side][k])) for k in ("allowed", "ran_on")} for side in b}
    out["client"]["max_procs"] = max(a["client"]["max_procs"], b["client"]["max_procs"])
    return out


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def host_info(server: list[int], client: list[int]) -> dict:
    """The machine, read before pinning: the load average first, then a float32 matmul rate on
    torch's default threads."""
    load = [round(x, 2) for x in os.getloadavg()]
    m, n, k = MATMUL_SHAPE
    rate = max(matmul_peak([MATMUL_SHAPE], seconds=1.0).values())
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "cores_available": sorted(os.sched_getaffinity(0)),
        "loadavg_start": load,
        "loadavg_end": None,
        "server_cores": server,
        "client_cores": client,
        "matmul_f32_gflops": round(rate / 1e9, 1),
        "matmul_shape": f"{m}x{k} @ {n}x{k}",
        **machine(),
    }
