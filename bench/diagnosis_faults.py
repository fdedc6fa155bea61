"""Faults planted for real by bench/diagnosis_accuracy.py: a network namespace behind a veth with
an iptables random-drop rule that can be switched on and off, CPU burner processes, a
background flow through a lossy namespace of its own, and pauses of the whole server process.

Everything is created by this process, bounded in time, and torn down in `close()`/`finally`
even when a case fails. This kernel has no netem, so loss is `-m statistic --mode random
--probability p -j DROP` on the namespace's INPUT chain: it drops what the client sends to the
server (requests and ACKs), which the client's sockets in the root namespace retransmit, so both
the target's own connections (`ss`) and the root namespace's host-wide counters see it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path


def _sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check, timeout=30)


def netns_unavailable() -> str | None:
    """Why network-namespace cases cannot run here (None when they can)."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth, iptables)"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (apt-get install -y iproute2 iptables)"
    return None


class LossyNamespace:
    """`ip netns` NAME with veth 10.<n>.0.1 (root side) <-> 10.<n>.0.2 (inside)."""

    def __init__(self, name: str, subnet: int, port: int, probability: float):
        self.name, self.port, self.p = name, port, probability
        self.host_ip, self.ns_ip = f"10.{subnet}.0.1", f"10.{subnet}.0.2"
        self.veth = f"{name[:8]}h"
        self._rule = [
            "-p",
            "tcp",
            "--dport",
            str(port),
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            str(probability),
            "-j",
            "DROP",
        ]
        self.loss_on = False

    def __enter__(self) -> "LossyNamespace":
        self.close()  # a previous run killed midway
        _sh("ip", "netns", "add", self.name)
        _sh("ip", "link", "add", self.veth, "type", "veth", "peer", "name", f"{self.name[:8]}n")
        _sh("ip", "link", "set", f"{self.name[:8]}n", "netns", self.name)
        _sh("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.veth)
        _sh("ip", "link", "set", self.veth, "up")
        inside = ["ip", "netns", "exec", self.name]
        _sh(*inside, "ip", "addr", "add", f"{self.ns_ip}/24", "dev", f"{self.name[:8]}n")
        _sh(*inside, "ip", "link", "set", f"{self.name[:8]}n", "up")
        _sh(*inside, "ip", "link", "set", "lo", "up")
        return self

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def set_loss(self, on: bool) -> None:
        if on == self.loss_on:
            return
        _sh(*self.exec_prefix(), "iptables", "-A" if on else "-D", "INPUT", *self._rule)
        self.loss_on = on

    def close(self) -> None:
        _sh("ip", "link", "del", self.veth, check=False)
        _sh("ip", "netns", "del", self.name, check=False)

    def __exit__(self, *exc) -> None:
        self.close()


class Burners:
    """N busy-loop processes (other processes on the host: not the server's, not the client's)."""

    def __init__(self, n: int, nice: int = 0, cores: set[int] | None = None):
        self.n, self.nice, self.cores = n, nice, cores  # cores: pin them there (the server's, say)
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        pin = f"os.sched_setaffinity(0, {sorted(self.cores)!r})\n" if self.cores else ""
        code = f"import os\n{pin}os.nice({self.nice})\nwhile True: pass"
        self.procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(self.n)]

    def stop(self) -> None:
        for p in self.procs:
            p.kill()
            p.wait(timeout=10)
        self.procs = []


class ServerPauses:
    """The whole server process stopped (SIGSTOP) and let go (SIGCONT): what a long garbage-collector
    pass or a blocking call on its event loop does to every stream at once. The server is this
    process's descendant running `refengine.server` (the sweep's embedded engine), found when first
    paused; a server on its own (pid given) for any other."""

    def __init__(self, pid: int | None = None):
        self.pid = pid
        self.stopped = False

    def _server(self) -> int:
        import psutil

        if self.pid is None:
            mine = psutil.Process().children(recursive=True)
            servers = [p for p in mine if "refengine.server" in " ".join(p.cmdline())]
            if len(servers) != 1:
                raise RuntimeError(f"expected one refengine.server below this process, found {len(servers)}")
            self.pid = servers[0].pid
        return self.pid

    def start(self) -> None:
        os.kill(self._server(), signal.SIGSTOP)
        self.stopped = True

    def stop(self) -> None:
        if self.stopped and self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.stopped = False


def first_record_time(run_dir: Path, timeout_s: float = 300.0) -> float:
    """Wall time when the sweep's first request finished (the load is running): the fault clock."""
    path = run_dir / "requests.jsonl"
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if path.exists() and path.stat().st_size > 0:
            return time.time()
        time.sleep(0.1)
    raise TimeoutError(f"no request finished in {run_dir} within {timeout_s:.0f} s")


class Toggler(threading.Thread):
    """Switch a fault on and off at offsets (s) after the first finished request: [(on_at, off_at), ...]."""

    def __init__(self, run_dir: Path, on, off, windows: list[tuple[float, float]]):
        super().__init__(daemon=True)
        self.run_dir, self.on, self.off, self.windows = run_dir, on, off, windows
        self.error: Exception | None = None
        self.applied: list[tuple[float, float]] = []

    def run(self) -> None:
        try:
            t0 = first_record_time(self.run_dir)
            for a, b in self.windows:
                time.sleep(max(0.0, t0 + a - time.time()))
                start = time.time()
                self.on()
                time.sleep(max(0.0, t0 + b - time.time()))
                self.off()
                self.applied.append((start, time.time()))
        except Exception as exc:  # noqa: BLE001 - reported by the case, which also turns the fault off
            self.error = exc
            self.off()
        # Beside the run (not part of its contract): when the fault really held, for realized_effect.
        (self.run_dir / FAULT_WINDOWS_FILE).write_text(json.dumps(self.applied))


FAULT_WINDOWS_FILE = "planted_fault_windows.json"


def realized_effect(run_dir: Path) -> float | None:
    """What the plant did to latency: the median TTFT of the measured requests that lived through
    the fault (half or more of their TTFT window inside it) over the median of those that did not.
    None for a fault held the whole time (nothing to compare) or without a record of when it held."""
    try:
        applied = json.loads((run_dir / FAULT_WINDOWS_FILE).read_text())
        rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return None
    inside, outside = [], []
    for r in rows:
        if r.get("status") != "ok" or not r.get("in_window") or r.get("ttft_s") is None:
            continue
        a, b = r["t_sent"], r["t_sent"] + r["ttft_s"]
        covered = sum(max(0.0, min(b, e) - max(a, s)) for s, e in applied)
        (inside if covered >= 0.5 * max(b - a, 1e-9) else outside).append(r["ttft_s"])
    if len(inside) < 3 or len(outside) < 3:
        return None
    return round(statistics.median(inside) / statistics.median(outside), 2)


def head_of_line_effect(run_dir: Path, long_at_least: int = 1000) -> float | None:
    """What long prompts did to the short ones: the median TTFT of the short requests whose wait for
    a first token overlapped a long prompt's (sent to first token) over the median of those that did
    not. The plant's own ground truth, from the prompts' lengths (the workload's long ones)."""
    try:
        rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return None
    ok = [r for r in rows if r.get("status") == "ok" and r.get("ttft_s") is not None]
    longs = [(r["t_sent"], r["t_sent"] + r["ttft_s"]) for r in ok if (r.get("target_input_len") or 0) >= long_at_least]
    inside, outside = [], []
    for r in ok:
        if not r.get("in_window") or (r.get("target_input_len") or 0) >= long_at_least:
            continue
        a, b = r["t_sent"], r["t_sent"] + r["ttft_s"]
        (inside if any(s < b and e > a for s, e in longs) else outside).append(r["ttft_s"])
    if len(inside) < 3 or len(outside) < 3:
        return None
    return round(statistics.median(inside) / statistics.median(outside), 2)


class BackgroundFlow(threading.Thread):
    """Requests to a small HTTP server inside a lossy namespace: other flows on this host that
    retransmit while the case's own target (on loopback) does not. Bounded by `seconds`."""

    def __init__(self, ns: LossyNamespace, seconds: float):
        super().__init__(daemon=True)
        self.ns, self.seconds = ns, seconds
        self.server: subprocess.Popen | None = None
        self.requests = 0

    def run(self) -> None:
        import urllib.request

        self.server = subprocess.Popen(
            [*self.ns.exec_prefix(), sys.executable, "-m", "http.server", str(self.ns.port), "--bind", self.ns.ns_ip],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)
        self.ns.set_loss(True)
        end = time.time() + self.seconds
        payload = b"x" * 20000  # several segments per request, so drops show as retransmits
        while time.time() < end:
            try:
                req = urllib.request.Request(f"http://{self.ns.ns_ip}:{self.ns.port}/", data=payload)
                urllib.request.urlopen(req, timeout=5).read()
            except Exception:  # noqa: BLE001 - http.server answers POST with 501; loss times some out
                pass
            self.requests += 1

    def stop(self) -> None:
        if self.server is not None:
            self.server.kill()
            self.server.wait(timeout=10)
