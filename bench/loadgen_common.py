"""Helpers for the load-generator benchmarks: a delay server that reports what it really did, and
a CPU sampler for the processes a benchmark starts.

The delay server is tests/loadgen/delay_server.py (first token X ms after arrival, then one every
Y ms), wrapped so that it records, per streamed request, its arrival and the moment its first
token had been handed to the socket, both on the epoch clock the client uses (time.time()).
`GET /x_timings` returns and clears them as [[arrival, first_ready, first_written, prompt_len], ...].
The client's RequestRecord carries no request id, so records are matched to server entries by
prompt length (give the workload a wide input_len_spread) and send order: see match_server_timings.

Several server processes can share one port with SO_REUSEPORT (the kernel spreads connections
over them); each also listens on a private control port, so its timings can be fetched from it.

    python bench/loadgen_common.py serve --port P --control-port C [--ttft-ms 50] [--itl-ms 10]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from bisect import bisect_left
from collections import defaultdict

import psutil

from rundir.ports import free_port

HOST = "127.0.0.1"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def http_impl() -> str:
    """What uvicorn's "auto" picks: httptools and uvloop parse and schedule faster than h11/asyncio."""
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return f"uvicorn {http}/{loop}"


# ----- the server side (runs in the server subprocess) ------------------------------------------


def _serve(argv: list[str]) -> None:
    import uvicorn
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    sys.path.insert(0, os.path.join(ROOT, "tests", "loadgen"))
    import logging

    from delay_server import DelayServer, _QuietDrops

    class TimedDelayServer(DelayServer):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.timings: list[tuple[float, float, float, int]] = []

        async def completions(self, request):
            t_arrival = time.time()
            resp = await super().completions(request)
            if isinstance(resp, StreamingResponse):
                prompt = (await request.json()).get("prompt")  # cached by Starlette: no second parse
                plen = len(prompt) if isinstance(prompt, list) else -1
                resp.body_iterator = self._timed(resp.body_iterator, t_arrival, plen)
            return resp

        async def _timed(self, inner, t_arrival: float, plen: int):
            # The first token's send is bracketed: `before` is when the chunk was ready (the
            # server's timer fired, it goes to send() next); `after` is when send() had written it
            # to the socket. The client may read it before the server resumes, so `after` can be
            # late; `before` is the conservative "actual" (the server's write cost counts as error).
            first = True
            try:
                async for chunk in inner:
                    before = time.time()
                    yield chunk
                    if first:
                        first = False
                        self.timings.append((t_arrival, before, time.time(), plen))
            finally:
                await inner.aclose()

        async def take_timings(self, request):
            out, self.timings = self.timings, []
            return JSONResponse(out)

        def app(self):
            app = super().app()
            app.router.routes.append(Route("/x_timings", self.take_timings, methods=["GET"]))
            return app

    p = argparse.ArgumentParser(prog="loadgen_common.py serve")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--control-port", type=int, required=True)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    a = p.parse_args(argv)
    shared = socket.socket()
    shared.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    shared.bind((HOST, a.port))
    control = socket.socket()
    control.bind((HOST, a.control_port))
    logging.getLogger("uvicorn.error").addFilter(_QuietDrops())
    config = uvicorn.Config(
        TimedDelayServer(a.ttft_ms, a.itl_ms).app(),
        log_level="warning",
        access_log=False,
        timeout_keep_alive=30,
        backlog=4096,
    )
    uvicorn.Server(config).run(sockets=[shared, control])


# ----- the client side ---------------------------------------------------------------------------


class DelayServers:
    """N delay server processes on one loopback port; killed on exit, whatever happened.
    cores="0" or "0,2-3": each runs under `taskset -c cores`, off the cores the client runs on."""

    def __init__(self, n: int, ttft_ms: float, itl_ms: float, startup_s: float = 20.0, cores: str | None = None):
        self.n, self.ttft_ms, self.itl_ms, self.startup_s, self.cores = n, ttft_ms, itl_ms, startup_s, cores
        self.port = free_port(HOST)
        self.url = f"http://{HOST}:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.controls: list[int] = []

    def __enter__(self) -> "DelayServers":
        try:
            for _ in range(self.n):
                control = free_port(HOST)
                log = tempfile.TemporaryFile()  # a pipe nobody reads would freeze the server when full
                cmd = [
                    sys.executable,
                    os.path.abspath(__file__),
                    "serve",
                    "--port",
                    str(self.port),
                    "--control-port",
                    str(control),
                    "--ttft-ms",
                    str(self.ttft_ms),
                    "--itl-ms",
                    str(self.itl_ms),
                ]
                if self.cores is not None:
                    cmd = ["taskset", "-c", self.cores] + cmd  # taskset execs: p.pid is the server's pid
                p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
                p.log = log
                self.procs.append(p)
                self.controls.append(control)
            deadline = time.monotonic() + self.startup_s
            for p, c in zip(self.procs, self.controls):
                while True:
                    if p.poll() is not None:
                        p.log.seek(0)
                        raise RuntimeError(f"delay server exited: {p.log.read().decode(errors='replace')[-2000:]}")
                    try:
                        _get(f"http://{HOST}:{c}/health")
                        break
                    except OSError:
                        if time.monotonic() > deadline:
                            raise TimeoutError("delay server did not start") from None
                        time.sleep(0.05)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.log.close()
        self.procs = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def take_timings(self) -> list[tuple[float, float, float, int]]:
        return [tuple(t) for c in self.controls for t in _get(f"http://{HOST}:{c}/x_timings", timeout=30)]


def _get(url: str, timeout: float = 2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def match_server_timings(records, timings, max_gap_s: float = 2.0):
    """Pair client records with server entries: same prompt length, then in send order, taking for
    each record the first unused entry that arrived at or after its t_sent (1 ms slack for clock
    resolution) and within max_gap_s. Returns [(record, arrival, first_ready, first_written)]; unmatched records are
    left out. Two same-length requests sent within a hair of each other may swap; a wide length
    spread makes that rare."""
    by_len = defaultdict(list)
    for arrival, ready, written, plen in timings:
        by_len[plen].append((arrival, ready, written))
    for v in by_len.values():
        v.sort()
    used: dict[int, set] = defaultdict(set)
    out = []
    for r in sorted(records, key=lambda r: r.t_sent):
        entries = by_len.get(r.client_prompt_tokens, [])
        i = bisect_left(entries, (r.t_sent - 0.001,))
        while i < len(entries) and (i in used[r.client_prompt_tokens]):
            i += 1
        if i < len(entries) and entries[i][0] - r.t_sent < max_gap_s:
            used[r.client_prompt_tokens].add(i)
            out.append((r, *entries[i]))
    return out


class CpuSampler:
    """Samples, every `interval_s`, the CPU seconds of this process's descendants (split into the
    server pids and the rest, i.e. the locust processes) and the whole machine's busy seconds, so
    a level's window can be charged afterwards with cpu(t0, t1)."""

    def __init__(self, server_pids: list[int], interval_s: float = 0.2):
        self.server_pids, self.interval_s = set(server_pids), interval_s
        self.samples: list[tuple[float, dict[int, float], float]] = []
        self._stop = threading.Event()
        self._me = psutil.Process()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "CpuSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            per_pid = {}
            for p in [self._me] + self._me.children(recursive=True):
                try:
                    t = p.cpu_times()
                    per_pid[p.pid] = t.user + t.system
                except psutil.Error:
                    pass  # exited between the listing and the read
            m = psutil.cpu_times()
            busy = m.user + m.nice + m.system + getattr(m, "irq", 0) + getattr(m, "softirq", 0) + getattr(m, "steal", 0)
            self.samples.append((time.time(), per_pid, busy))
            self._stop.wait(self.interval_s)

    def cpu(self, t0: float, t1: float) -> dict:
        """Percent of one core over [t0, t1]: server (all its processes), client (locust processes),
        and the machine's busy cores, with `other_cpus` = cores busy with work that is not ours."""
        s = [x for x in self.samples if t0 - self.interval_s <= x[0] <= t1 + self.interval_s]
        if len(s) < 2:
            return {}
        (ta, a, ma), (tb, b, mb) = s[0], s[-1]
        dt = tb - ta
        both = a.keys() & b.keys()
        d = {pid: b[pid] - a[pid] for pid in both}
        server = sum(v for pid, v in d.items() if pid in self.server_pids)
        client = sum(v for pid, v in d.items() if pid not in self.server_pids and pid != self._me.pid)
        ours = sum(d.values())
        return {
            "server_cpu_pct": 100 * server / dt,
            "client_cpu_total_pct": 100 * client / dt,
            "harness_cpu_pct": 100 * d.get(self._me.pid, 0.0) / dt,
            "machine_cpus": (mb - ma) / dt,
            "other_cpus": max(0.0, (mb - ma - ours) / dt),
        }


if __name__ == "__main__":
    if sys.argv[1:2] != ["serve"]:
        sys.exit(__doc__)
    _serve(sys.argv[2:])
