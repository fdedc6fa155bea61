"""Does the HTTP implementation slow the engine? The same served load with uvicorn's h11 + asyncio
and with httptools + uvloop, side by side in one run.

refengine serves from one process: the engine steps on its own thread, HTTP runs on the event
loop's, and the two share the GIL (and, pinned, one core). Every streamed token is an SSE chunk that
the event loop writes; whatever that costs, the engine's step waits for. Arms: `--http h11 --loop
asyncio` and `--http httptools --loop uvloop`, each a fresh `python -m refengine.server` on
--server-cores, driven by `llmbench sweep --target` on --client-cores at each concurrency (closed
loop, fixed warm-up and window). Arms alternate, --reps times (the VM's speed drifts over minutes).
Per arm and level: TPOT mean, TTFT P50 and output tok/s from the sweep's summary, and the server's
CPU per generated token split by thread (the event loop: the main thread; the engine: the
busiest other thread; the rest: torch's and the prep pool's), from /proc/<pid>/task over the level and
the server's own `vllm:generation_tokens_total`.

    python bench/http_impl.py [--model tiny-test] [--concurrency 1,4,16] [--input-len 128]
                              [--output-len 64] [--reps 2] [--server-cores 0] [--client-cores 1]
                              [--out bench/http_impl.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from common import print_table, thread_cpu_s, write_json  # noqa: E402
from cores import check_cores, core_list, host_info, parse_cores  # noqa: E402
from loopback_server import launch_refengine, stop, wait_healthy  # noqa: E402

from probes.prom import parse_metrics  # noqa: E402

ARMS = {
    "h11+asyncio": ["--http", "h11", "--loop", "asyncio"],
    "httptools+uvloop": ["--http", "httptools", "--loop", "uvloop"],
}


def by_kind(pid: int, before: dict[int, float], after: dict[int, float]) -> dict[str, float]:
    """The CPU seconds a level cost, by kind of thread: "event loop" (the main thread), "engine" (the
    busiest of the others: the engine's loop thread, which Python does not name for the OS) and
    "other" (torch's, the prep pool's)."""
    spent = {tid: after[tid] - before.get(tid, 0.0) for tid in after}
    loop = spent.pop(pid, 0.0)
    engine_tid = max(spent, key=spent.__getitem__, default=None)
    engine = spent.pop(engine_tid, 0.0) if engine_tid is not None else 0.0
    return {"event loop": loop, "engine": engine, "other": sum(spent.values())}


def generated_tokens(url: str) -> float:
    """The server's own count of generated tokens so far (its /metrics, read by the server probe's parser)."""
    return parse_metrics(httpx.get(url + "/metrics", timeout=10.0).text).values["generation_tokens_total"]


def sweep_level(url: str, c: int, a, run: Path) -> dict:
    cmd = ["taskset", "-c", core_list(a.client_cores), sys.executable, "-m", "llmbench.cli", "sweep"]
    cmd += ["--target", url, "--concurrency", str(c), "--input-len", str(a.input_len)]
    cmd += ["--output-len", str(a.output_len), "--warmup", str(a.warmup), "--duration", str(a.duration)]
    cmd += ["--probes", "server", "--out", str(run)]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    if p.returncode != 0:
        raise RuntimeError(f"sweep at c{c} failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    (lv,) = json.loads((run / "summary.json").read_text())["levels"]
    return lv


def measure_arm(arm: str, a, work: Path, rep: int) -> list[dict]:
    args = ["--model", a.model, "--max-num-seqs", "128", *ARMS[arm]]
    proc, url = launch_refengine(args, core_list(a.server_cores))
    rows = []
    try:
        wait_healthy(url, proc)
        for c in a.concurrency:
            cpu0, tok0 = thread_cpu_s(proc.pid), generated_tokens(url)
            lv = sweep_level(url, c, a, work / f"{arm}-r{rep}-c{c}")
            cpu1, tok1 = thread_cpu_s(proc.pid), generated_tokens(url)
            tokens, spent = tok1 - tok0, by_kind(proc.pid, cpu0, cpu1)
            rows.append(
                {
                    "arm": arm,
                    "rep": rep,
                    "concurrency": c,
                    "tpot_mean_ms": lv["tpot"]["mean"] * 1e3 if lv["tpot"].get("mean") else None,
                    "ttft_p50_ms": lv["ttft"]["p"]["p50"] * 1e3 if lv["ttft"].get("p") else None,
                    "output_tok_s": lv["output_tok_s"],
                    "tokens": tokens,
                    "cpu_ms_per_token": {k: v * 1e3 / tokens for k, v in spent.items()} if tokens else None,
                }
            )
    finally:
        stop(proc)
    return rows


def summarize(rows: list[dict], concurrency: list[int]) -> list[dict]:
    """Per arm and concurrency: the median over repetitions of each figure."""
    out = []
    for c in concurrency:
        for arm in ARMS:
            mine = [r for r in rows if r["arm"] == arm and r["concurrency"] == c]

            def med(key, sub=None):
                vals = [r[key][sub] if sub else r[key] for r in mine if r[key] is not None]
                return statistics.median(vals) if vals else None

            out.append(
                {
                    "concurrency": c,
                    "arm": arm,
                    "reps": len(mine),
                    "tpot_mean_ms": med("tpot_mean_ms"),
                    "ttft_p50_ms": med("ttft_p50_ms"),
                    "output_tok_s": med("output_tok_s"),
                    **{f"cpu_ms_per_token_{k}": med("cpu_ms_per_token", k) for k in ("event loop", "engine", "other")},
                }
            )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny-test")
    p.add_argument("--concurrency", default="1,4,16", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--reps", type=int, default=2, help="each arm this many times, alternating")
    p.add_argument("--server-cores", default="0", type=parse_cores)
    p.add_argument("--client-cores", default="1", type=parse_cores)
    p.add_argument("--out", default=str(ROOT / "bench" / "http_impl.json"))
    a = p.parse_args()
    problem = check_cores(a.server_cores, a.client_cores)
    if problem:
        raise SystemExit(problem)
    host = host_info(a.server_cores, a.client_cores)
    t0 = time.monotonic()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="http-impl-") as tmp:
        for rep in range(a.reps):
            for arm in ARMS if rep % 2 == 0 else reversed(list(ARMS)):
                rows += measure_arm(arm, a, Path(tmp), rep)
    host["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    table = summarize(rows, a.concurrency)

    def fmt(v, spec=".1f"):
        return "-" if v is None else format(v, spec)

    print_table(
        f"{a.model}, prompts {a.input_len}, outputs {a.output_len}: medians of {a.reps} runs per arm",
        ["c", "arm", "TPOT mean ms", "TTFT P50 ms", "tok/s", "CPU ms/token: event loop", "engine", "other"],
        [
            [r["concurrency"], r["arm"], fmt(r["tpot_mean_ms"], ".2f"), fmt(r["ttft_p50_ms"]), fmt(r["output_tok_s"])]
            + [fmt(r[f"cpu_ms_per_token_{k}"], ".3f") for k in ("event loop", "engine", "other")]
            for r in table
        ],
    )
    write_json(
        a.out,
        {
            "bench": "http_impl",
            "args": vars(a),
            "host": host,
            "wall_s": round(time.monotonic() - t0, 1),
            "runs": rows,
            "table": table,
        },
    )


if __name__ == "__main__":
    main()
