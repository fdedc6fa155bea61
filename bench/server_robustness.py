"""Server robustness (issue 14), side by side for this tree and, with --baseline, another one.

1. inputs: issue 14's listed inputs, then N Hypothesis-generated hostile bodies (the same ones,
   derandomized, for every tree; tests/refengine/server/hostile_bodies.py), each followed by GET /health:
   5xx answers, hangs, errors inside streams, and engine deaths (the server is restarted after
   each, up to --max-restarts).
2. overload: --max-waiting-requests 4 against 40 closed-loop clients (10x): the most requests
   ever waiting in the scheduler (read inside the server after every admission), and whether
   every request was counted once (/metrics: success + rejected = sent).
3. /health latency, probed every 10 ms from another process, while a 10 MB prompt is read;
   for this tree also with the prompt tokenized in full (the prefix check switched off).

  python bench/server_robustness.py --baseline /tmp/base --json bench/server_robustness.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(REPO, "tests"), os.path.join(REPO, "tests", "refengine", "server")]
from common import CpuMeter, note  # noqa: E402
from refengine_proc import free_port, wait_healthy  # noqa: E402

# Runs the real server CLI with two bench-only hooks: the peak of the scheduler's waiting queue,
# written to a file after each admission, and optionally no prefix check before tokenizing.
LAUNCHER = r"""
import sys
from refengine.engine import LLMEngine
peak_file, full_tokenize, argv = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
peak = [0]
add = LLMEngine.add_request
def add_request(self, *args, **kwargs):
    out = add(self, *args, **kwargs)
    if self.scheduler.num_waiting > peak[0]:
        peak[0] = self.scheduler.num_waiting
        open(peak_file, "w").write(str(peak[0]))
    return out
LLMEngine.add_request = add_request
if full_tokenize:
    import refengine.server.prompt_tokens as p
    p.PROBE_CHARS = 1 << 62
from refengine.server.cli import main
sys.exit(main(argv))
"""

PROBER = r"""
import json, sys, threading, time, httpx
url, stop = sys.argv[1], threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
out = []
with httpx.Client(timeout=60) as c:
    while not stop.is_set():
        t0 = time.time()
        c.get(url + "/health")
        out.append((t0, time.time() - t0))
        if len(out) == 20:
            print("ready", flush=True)   # enough idle probes for the floor
        time.sleep(0.01)
print(json.dumps(out))
"""


class Target:
    """One tree's server process (restartable), with the peak-waiting hook."""

    def __init__(self, tree: str, args: list[str], full_tokenize: bool = False):
        self.tree, self.args, self.full_tokenize = tree, args, full_tokenize
        self.peak_file = tempfile.mktemp(prefix="peak-waiting-")
        self.proc = None
        self.start()

    def start(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "PYTHONPATH": self.tree, "PYTHONDONTWRITEBYTECODE": "1"}
        cmd = [
            sys.executable,
            "-c",
            LAUNCHER,
            self.peak_file,
            "1" if self.full_tokenize else "0",
            "--model",
            "tiny-test",
            "--port",
            str(port),
            *self.args,
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=self.tree)
        wait_healthy(self.url, timeout=180)

    def restart(self) -> None:
        self.stop()
        self.start()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()

    @property
    def peak_waiting(self) -> int:
        try:
            return int(open(self.peak_file).read())
        except (OSError, ValueError):
            return 0


# ----- 1. inputs ------------------------------------------------------------------------------
def listed_inputs() -> list[tuple[str, bytes]]:
    from hostile_bodies import BARE_500S, CHAT, CHAT_BODY, COMPLETION, ENGINE_KILLERS, C

    out = [
        (path, ((COMPLETION if path == C else CHAT_BODY) % fields).encode())
        for fields, _, _ in ENGINE_KILLERS
        for path in (C, CHAT)
    ]
    return out + [(path, raw if isinstance(raw, bytes) else raw.encode()) for path, raw, _, _ in BARE_500S]


def generated_inputs(n: int) -> list[tuple[str, bytes]]:
    from hostile_bodies import BODIES
    from hypothesis import HealthCheck, given, settings

    out = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(BODIES)
    def collect(example):
        out.append(example)

    collect()
    return out


def send(url: str, path: str, raw: bytes) -> tuple[str, bool]:
    """('200' / '400' / ... / 'hang' / 'conn'), and whether a 200 stream carried an error."""
    try:
        with httpx.stream(
            "POST", url + path, content=raw, headers={"content-type": "application/json"}, timeout=httpx.Timeout(30.0)
        ) as r:
            lines = [line for line in r.iter_lines() if line]
            stream_error = r.status_code == 200 and any('"error"' in line for line in lines)
            return str(r.status_code), stream_error
    except httpx.TimeoutException:
        return "hang", False
    except httpx.HTTPError:
        return "conn", False


def run_inputs(target: Target, inputs: list[tuple[str, bytes]], max_restarts: int) -> dict:
    statuses, stream_errors, deaths, done = {}, 0, 0, 0
    for path, raw in inputs:
        status, stream_error = send(target.url, path, raw)
        statuses[status] = statuses.get(status, 0) + 1
        stream_errors += stream_error
        done += 1
        try:
            alive = httpx.get(target.url + "/health", timeout=30).status_code == 200
        except httpx.HTTPError:
            alive = False
        if not alive:
            deaths += 1
            if deaths > max_restarts:
                break
            target.restart()
    n5xx = sum(v for k, v in statuses.items() if k.isdigit() and int(k) >= 500)
    return {
        "sent": done,
        "of": len(inputs),
        "statuses": dict(sorted(statuses.items())),
        "5xx": n5xx,
        "hangs": statuses.get("hang", 0),
        "stream_errors": stream_errors,
        "engine_deaths": deaths,
    }


# ----- 2. overload ----------------------------------------------------------------------------
def run_overload(target: Target, clients: int, seconds: float) -> dict:
    body = {"prompt": [4] * 64, "max_tokens": 16, "ignore_eos": True, "temperature": 0}

    async def worker(client, until, counts):
        while time.monotonic() < until:
            r = await client.post("/v1/completions", json=body)
            counts[r.status_code] = counts.get(r.status_code, 0) + 1
            await asyncio.sleep(0.005)

    async def run():
        counts = {}
        limits = httpx.Limits(max_connections=clients + 10)
        async with httpx.AsyncClient(base_url=target.url, timeout=120, limits=limits) as client:
            until = time.monotonic() + seconds
            await asyncio.gather(*(worker(client, until, counts) for _ in range(clients)))
        return counts

    counts = asyncio.run(run())
    time.sleep(0.5)
    metrics = httpx.get(target.url + "/metrics").text
    counted = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(("vllm:request_success_total{", "refengine:requests_rejected_total{"))
    )
    sent = sum(counts.values())
    return {
        "clients": clients,
        "seconds": seconds,
        "sent": sent,
        "by_status": dict(sorted(counts.items())),
        "peak_waiting": target.peak_waiting,
        "all_counted_once": counted == sent,
    }


# ----- 3. /health while a 10 MB prompt is read --------------------------------------------------
def run_health(target: Target, size: int = 10_000_000) -> dict:
    prompt = ("the quick brown fox jumps over the lazy dog. " * (size // 45 + 1))[:size]
    prober = subprocess.Popen(
        [sys.executable, "-c", PROBER, target.url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert prober.stdout.readline().strip() == "ready"
    t0 = time.time()
    r = httpx.post(target.url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2}, timeout=300)
    t1 = time.time()
    time.sleep(0.5)
    out, _ = prober.communicate("stop")
    probes = json.loads(out.strip().splitlines()[-1])
    during = sorted(lat for start, lat in probes if t0 <= start <= t1 or start < t0 < start + lat)
    idle = sorted(lat for start, lat in probes if start + lat < t0)  # the same probes before: this machine's floor

    def ms(xs, q):
        return round(1000 * xs[min(len(xs) - 1, int(q * len(xs)))], 1) if xs else None

    return {
        "prompt_chars": size,
        "status": r.status_code,
        "answered_in_s": round(t1 - t0, 3),
        "health_probes": len(during),
        "health_p50_ms": ms(during, 0.5),
        "health_max_ms": ms(during, 1.0),
        "idle_health_p50_ms": ms(idle, 0.5),
        "idle_health_max_ms": ms(idle, 1.0),
    }


def _metered(target: Target, fn, *args) -> dict:
    """fn's figures plus the CPUs other processes (not the bench, not the server) used meanwhile."""
    with CpuMeter(pids=[target.proc.pid]) as m:
        out = fn(target, *args)
    return dict(out, other_cpus=round(m.other_cpus, 2))


def measure(tree: str, n: int, max_restarts: int, full_tokenize_too: bool) -> dict:
    res = {"tree": tree}
    note(f"{tree}: inputs")
    t = Target(tree, ["--max-model-len", "256"])
    try:
        res["listed_inputs"] = _metered(t, run_inputs, listed_inputs(), max_restarts)
        res["generated_inputs"] = _metered(t, run_inputs, generated_inputs(n), max_restarts)
        note(f"{tree}: /health while a 10 MB prompt is read")
        res["health_10mb"] = _metered(t, run_health)
    finally:
        t.stop()
    note(f"{tree}: overload")
    t = Target(tree, ["--max-model-len", "256", "--max-waiting-requests", "4", "--max-num-seqs", "4"])
    try:
        res["overload"] = _metered(t, run_overload, 40, 10.0)
    finally:
        t.stop()
    if full_tokenize_too:
        note(f"{tree}: /health while a 10 MB prompt is tokenized in full")
        t = Target(tree, ["--max-model-len", "256"], full_tokenize=True)
        try:
            res["health_10mb_full_tokenize"] = _metered(t, run_health)
        finally:
            t.stop()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=500, help="generated bodies per tree (default: %(default)s)")
    ap.add_argument(
        "--baseline",
        default=None,
        help="another source tree to measure the same way (e.g. the commit before the fix, from `git archive`)",
    )
    ap.add_argument("--max-restarts", type=int, default=40, help="engine deaths after which a tree's input run stops")
    ap.add_argument("--json", default=None, help="write the results here")
    a = ap.parse_args()
    from common import machine

    results = {"machine": machine(), "this": measure(REPO, a.examples, a.max_restarts, full_tokenize_too=True)}
    if a.baseline:
        results["baseline"] = measure(os.path.abspath(a.baseline), a.examples, a.max_restarts, full_tokenize_too=False)
    print(json.dumps(results, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
