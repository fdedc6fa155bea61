"""What a second replica buys, and what the balancing policy costs: the reference engine served
as one replica and as a fleet of two (`--data-parallel-size 2`, each replica on a core of its own),
driven by the same seeded open-loop trace (Poisson arrivals, the same offered load), and the fleet
of two under round robin and least-outstanding on a heavy-tailed output-length mix.

    python bench/fleet_scaling.py [--model tiny] [--span 90] [--seed 0] [--out bench/fleet_scaling.json]

The offered load is set from this host in the same invocation: a closed-loop calibration measures
one replica's throughput (requests/s at --calibration-concurrency), the scaling trace offers
--over x that (more than one replica serves, less than two), the heavy-tailed trace --mix-load x
two replicas' worth. Every case replays its trace once (`--workload trace`), so each fleet sees the
same requests at the same instants, measured to the end (a TTFT bound of 120 s, so that the sweep
does not stop a level whose queue grows as over capacity: that queue is the measurement). The server (its front and replicas) gets every core (taskset
-c 0,1: replica 0 on core 0, replica 1 on core 1); the client runs on core 1 (2-core machine: in the
two-replica cases it shares that core with replica 1, and its CPU time is recorded to show what it
took). Per case: the fleet's output tok/s, TTFT P50/P99, TPOT P50/P95 and E2E P99 (from the sweep's
summary.json), each replica's share of the requests and its TTFT P99, and the client's CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

from cores import host_info  # noqa: E402

from bench.loopback_server import launch_refengine, stop, wait_healthy  # noqa: E402

INPUT_LEN, OUTPUT_LEN = 64, 32
HEAVY_MIX = ((0.8, 8), (0.2, 128))  # (share, output tokens): mean 32, like the uniform trace
SERVER_CORES, CLIENT_CORES = "0,1", "1"
# A TTFT bound no case reaches: the sweep stops an open-loop level whose queue runs away past twice
# its bound (loadgen/saturation.py); here the one replica's growing queue is what is measured.
SLO_TTFT_S = 120


@dataclass
class Case:
    name: str
    replicas: int
    policy: str
    trace: str  # "uniform" or "heavy"


@dataclass
class Outcome:
    case: str
    replicas: int
    policy: str
    trace: str
    offered_req_s: float
    requests: int
    errors: int
    output_tok_s: float
    req_s: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p95_ms: float | None
    e2e_p99_ms: float | None
    per_replica: list[dict]  # replica, request share, token share, TTFT P99 ms
    client_cpu_s: float
    wall_s: float


def write_trace(path: Path, rate: float, span_s: float, mix: tuple[tuple[float, int], ...], seed: int) -> int:
    """A Mooncake-format trace: Poisson arrivals at `rate` over `span_s`, outputs drawn from `mix`."""
    rng = np.random.default_rng(seed)
    t, rows = 0.0, []
    shares = np.array([s for s, _ in mix])
    lengths = [n for _, n in mix]
    while True:
        t += rng.exponential(1.0 / rate)
        if t > span_s:
            break
        out = lengths[int(rng.choice(len(lengths), p=shares / shares.sum()))]
        rows.append({"timestamp": round(t * 1000, 3), "input_length": INPUT_LEN, "output_length": out})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def start_fleet(model: str, replicas: int, policy: str) -> tuple[subprocess.Popen, str]:
    """The engine (one server, or a front and its replicas) under taskset; (process, URL) once healthy."""
    cores = SERVER_CORES if replicas > 1 else SERVER_CORES.split(",")[0]
    proc, url = launch_refengine(
        ["--model", model, "--data-parallel-size", str(replicas), "--lb-policy", policy], cores
    )
    try:
        wait_healthy(url, proc)
    except RuntimeError:
        proc.kill()
        raise
    return proc, url


def sweep(url: str, out: Path, extra: list[str]) -> tuple[dict, float, float]:
    """The real CLI on the client's core; its summary.json, its CPU seconds and wall seconds."""
    cmd = [
        "taskset",
        "-c",
        CLIENT_CORES,
        sys.executable,
        "-m",
        "llmbench.cli",
        "sweep",
        "--target",
        url,
        "--input-len",
        str(INPUT_LEN),
        "--probes",
        "server",
        "--request-timeout",
        "300s",
        "--slo-ttft",
        str(SLO_TTFT_S),
        "--slo-tpot",
        "1",
        "--out",
        str(out),
        *extra,
    ]
    t0, cpu0 = time.monotonic(), os.times()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=1800, cwd=ROOT, env={**os.environ, "COLUMNS": "200"}
    )
    cpu1 = os.times()
    if proc.returncode != 0:
        raise RuntimeError(f"sweep exit {proc.returncode}\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}")
    client_cpu = (cpu1.children_user - cpu0.children_user) + (cpu1.children_system - cpu0.children_system)
    return json.loads((out / "summary.json").read_text()), client_cpu, time.monotonic() - t0


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 1)


def outcome(case: Case, offered: float, summary: dict, cpu_s: float, wall_s: float) -> Outcome:
    lv = summary["levels"][0]
    per_replica = [
        {
            "replica": r["replica"],
            "request_share": round(r["request_share"], 3),
            "token_share": round(r["token_share"], 3),
            "ttft_p99_ms": _ms(r["ttft_p99_s"]),
        }
        for r in summary.get("replicas", [])
        if r["level_id"] == lv["level_id"]
    ]

    def pct(metric: str, p: str) -> float | None:
        return _ms((lv[metric].get("p") or {}).get(p))

    return Outcome(
        case.name,
        case.replicas,
        case.policy,
        case.trace,
        round(offered, 3),
        lv["n_in_window"],
        lv["n_error"] + lv["n_timeout"],
        round(lv["output_tok_s"], 1),
        round(lv["req_s"], 3),
        pct("ttft", "p50"),
        pct("ttft", "p99"),
        pct("tpot", "p50"),
        pct("tpot", "p95"),
        pct("e2e", "p99"),
        per_replica,
        round(cpu_s, 1),
        round(wall_s, 1),
    )


def calibrate(model: str, tmp: Path, concurrency: int) -> float:
    """One replica's closed-loop requests/s at `concurrency` (the uniform lengths)."""
    server, url = start_fleet(model, 1, "round-robin")
    try:
        summary, _, _ = sweep(
            url,
            tmp / "calibration",
            ["--concurrency", str(concurrency), "--output-len", str(OUTPUT_LEN), "--warmup", "5s", "--duration", "30s"],
        )
    finally:
        stop(server)
    return float(summary["levels"][0]["req_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--span", type=float, default=90.0, help="Seconds of each trace.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--calibration-concurrency", type=int, default=8)
    ap.add_argument("--over", type=float, default=1.4, help="Scaling trace: offered load / one replica's throughput.")
    ap.add_argument("--mix-load", type=float, default=0.8, help="Heavy-tailed trace: offered load / two replicas'.")
    ap.add_argument("--out", default=str(ROOT / "bench/fleet_scaling.json"))
    args = ap.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    host = host_info([0, 1], [1])
    cases = [
        Case("1 replica", 1, "round-robin", "uniform"),
        Case("2 replicas, round robin", 2, "round-robin", "uniform"),
        Case("2 replicas, round robin", 2, "round-robin", "heavy"),
        Case("2 replicas, least-outstanding", 2, "least-outstanding", "heavy"),
    ]
    outcomes = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        one = calibrate(args.model, tmp, args.calibration_concurrency)
        rates = {"uniform": args.over * one, "heavy": args.mix_load * 2 * one}
        traces = {"uniform": ((1.0, OUTPUT_LEN),), "heavy": HEAVY_MIX}
        sent = {
            name: write_trace(tmp / f"{name}.jsonl", rates[name], args.span, traces[name], args.seed) for name in traces
        }
        print(
            f"one replica: {one:.2f} req/s at c{args.calibration_concurrency}; offered {rates} req/s; "
            f"trace requests {sent}",
            flush=True,
        )
        for i, case in enumerate(cases):
            server, url = start_fleet(args.model, case.replicas, case.policy)
            try:
                summary, cpu_s, wall_s = sweep(
                    url, tmp / f"run{i}", ["--workload", "trace", "--dataset", str(tmp / f"{case.trace}.jsonl")]
                )
            finally:
                stop(server)
            o = outcome(case, rates[case.trace], summary, cpu_s, wall_s)
            outcomes.append(o)
            print(
                f"{o.case} ({o.trace}): {o.output_tok_s} tok/s, TTFT P50/P99 {o.ttft_p50_ms}/{o.ttft_p99_ms} ms, "
                f"TPOT P50 {o.tpot_p50_ms} ms, errors {o.errors}, replicas {o.per_replica}, "
                f"client CPU {o.client_cpu_s} s of {o.wall_s} s",
                flush=True,
            )
    host["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    Path(args.out).write_text(
        json.dumps(
            {
                "command": " ".join(["python", *sys.argv]),
                "started": started,
                "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "host": host,
                "one_replica_req_s": round(one, 3),
                "offered_req_s": {k: round(v, 3) for k, v in rates.items()},
                "trace_requests": sent,
                "heavy_mix": HEAVY_MIX,
                "input_len": INPUT_LEN,
                "outcomes": [asdict(o) for o in outcomes],
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
