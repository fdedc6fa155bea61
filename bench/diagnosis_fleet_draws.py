"""The fleet's draws for bench/diagnosis_family.py (`--family fleet`): two replicas of tiny-test,
one of three situations with random parameters, planted for real.

- hot-replica: two servers driven URL by URL, each on a core of its own (taskset), one of them (drawn)
  made slow by a drawn mechanism: a KV cache with room for 2 or 3 requests, or busy loops pinned to
  its core. Expected first: `p99.fleet.hot-replica`.
- fleet-imbalance: two equal replicas behind the fleet front's round robin (`--data-parallel-size 2`,
  each on a core of its own), a batch cap of 1 or 2, and a seeded Poisson trace whose output lengths
  are heavy-tailed (long share, long length and the slots' utilization drawn; the rate follows). Expected first: `p99.fleet.imbalance`. Its
  effect is measured by the cure: the same trace again under least-outstanding (`_imbalance`).
- fleet-clean: two equal replicas behind the front, a light closed loop, the policy drawn. Expected:
  nothing.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from bench.diagnosis_accuracy import CaseResult, finish, run_embedded, sweep
from bench.diagnosis_faults import Burners
from bench.loopback_server import launch_refengine, wait_healthy

FLEET_EXPECTED = {
    "fleet-clean": [],
    "hot-replica": ["p99.fleet.hot-replica"],
    "fleet-imbalance": ["p99.fleet.imbalance"],
}
FLEET_MIX = {"fleet-clean": 3, "hot-replica": 6, "fleet-imbalance": 5}  # per 14 draws
TIMING = ["--warmup", "2s", "--duration", "12s", "--probes", "server,host,tcp"]
BLOCK = 16


def make_fleet_draw(seed: int, index: int, cause: str, draw_type):
    rng = random.Random(f"fleet:{seed}:{index}")
    if cause == "fleet-clean":
        params = {
            "policy": rng.choice(["round-robin", "least-outstanding"]),
            "concurrency": rng.choice([2, 3, 4]),
            "input_len": rng.choice([16, 32]),
            "output_len": rng.choice([16, 32]),
        }
        args = [
            "--model",
            "tiny-test",
            "--data-parallel-size",
            "2",
            "--lb-policy",
            params["policy"],
            "--concurrency",
            str(params["concurrency"]),
            "--input-len",
            str(params["input_len"]),
            "--output-len",
            str(params["output_len"]),
            *TIMING,
        ]
        return draw_type(index, cause, params, args, [])
    if cause == "hot-replica":
        inp, out = 32, rng.choice([32, 48])
        params = {
            "hot": rng.choice([0, 1]),
            "mechanism": rng.choice(["small-kv", "cpu-burner"]),
            "concurrency": rng.choice([6, 8, 10]),
            "input_len": inp,
            "output_len": out,
        }
        if params["mechanism"] == "small-kv":
            # Room for fewer requests than its half of the users, by at least one: a cache for 3 at
            # concurrency 6 holds its share and plants nothing (seed 4, draw 9).
            params["requests_that_fit"] = rng.choice([f for f in (2, 3) if f < params["concurrency"] // 2])
            params["kv_blocks"] = params["requests_that_fit"] * -(-(inp + out) // BLOCK)
        else:
            params["burners"] = rng.choice([2, 3])
        return draw_type(index, cause, params, [], FLEET_EXPECTED[cause])
    if cause == "fleet-imbalance":
        params = {
            "utilization": rng.choice([0.3, 0.4, 0.5]),
            "long_share": rng.choice([0.15, 0.2, 0.3]),
            "long_median": rng.choice([200, 300, 400]),
            "max_num_seqs": rng.choice([1, 2]),
            "seconds": 30.0,
            "trace_seed": rng.randrange(1 << 30),
        }
        params["rate"] = imbalance_rate(params)
        return draw_type(index, cause, params, [], FLEET_EXPECTED[cause])
    raise ValueError(cause)


# tiny-test's pace on this host (bench/RESULTS.md, fleet family): a decode step of a few sequences and
# a short request's prefill plus 8 tokens. Only to set the drawn utilization's rate, not measured by it.
DECODE_S, SHORT_REQUEST_S = 0.0035, 0.04
MAX_RATE = 6.0  # req/s: the client and the fleet's front share the two cores with the replicas


def imbalance_rate(p: dict) -> float:
    """The arrival rate at which the two replicas' batch slots are busy p["utilization"] of the time on
    average, so that the fleet has room and round robin, not saturation, makes the waits (at 4-6 req/s
    with slots for 2-3 most seed-4 draws queued rarely, or under both policies alike); at most MAX_RATE."""
    service_s = p["long_share"] * p["long_median"] * DECODE_S + (1 - p["long_share"]) * SHORT_REQUEST_S
    return round(min(MAX_RATE, p["utilization"] * 2 * p["max_num_seqs"] / service_s), 2)


def heavy_trace(path: Path, p: dict) -> Path:
    """Poisson arrivals at p["rate"]; a p["long_share"] of requests ask for a lognormal length around
    p["long_median"] (clipped to 2.5x either way), the rest for 8 tokens; prompts of 32 tokens."""
    rng = np.random.default_rng(p["trace_seed"])
    t, rows = 0.0, []
    while True:
        t += float(rng.exponential(1.0 / p["rate"]))
        if t > p["seconds"]:
            break
        long = rng.random() < p["long_share"]
        m = p["long_median"]
        out = int(np.clip(rng.lognormal(np.log(m), 0.4), m / 2.5, m * 2.5)) if long else 8
        i = len(rows)
        rows.append(
            json.dumps(
                {"timestamp": int(t * 1000), "input_length": 32, "output_length": out, "hash_ids": [2 * i, 2 * i + 1]}
            )
        )
    path.write_text("\n".join(rows) + "\n")
    return path


def _hot_replica(tmp: Path, name: str, p: dict) -> Path:
    """Replica r on core r; the hot one with a small KV cache, or with busy loops on its core for the
    whole level (the client runs on the other core)."""
    out = tmp / name
    small = [
        "--num-gpu-blocks-override",
        str(p.get("kv_blocks", 0)),
        "--block-size",
        str(BLOCK),
        "--max-model-len",
        "128",
    ]
    servers = [
        launch_refengine(
            ["--model", "tiny-test", *(small if (r == p["hot"] and p["mechanism"] == "small-kv") else [])], str(r)
        )
        for r in (0, 1)
    ]
    burners = Burners(p["burners"], 0, {p["hot"]}) if p["mechanism"] == "cpu-burner" else None
    try:
        for proc, url in servers:
            wait_healthy(url, proc, 180)
        if burners is not None:
            burners.start()
        cold = 1 - p["hot"]
        client = ["taskset", "-c", str(cold)]
        finish(
            sweep(
                out,
                [
                    "--target",
                    ",".join(url for _, url in servers),
                    "--model",
                    "tiny-test",
                    "--input-len",
                    str(p["input_len"]),
                    "--output-len",
                    str(p["output_len"]),
                    "--concurrency",
                    str(p["concurrency"]),
                    *TIMING,
                ],
                prefix=client,
            )
        )
    finally:
        if burners is not None:
            burners.stop()
        for proc, _ in servers:
            proc.kill()
            proc.wait(timeout=10)
    return out


def tail_ttft_s(run_dir: Path, share: float = 0.1) -> float | None:
    """The mean TTFT of the slowest `share` of a run's measured requests: the tail, steadier than a
    P99 that at ~150 requests is one or two of them."""
    rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines() if line.strip()]
    ttfts = sorted(r["ttft_s"] for r in rows if r.get("status") == "ok" and r.get("in_window") and r.get("ttft_s"))
    k = max(1, round(share * len(ttfts)))
    return float(np.mean(ttfts[-k:])) if len(ttfts) >= 10 else None


def _imbalance(tmp: Path, name: str, p: dict, res: CaseResult) -> Path:
    """Round robin on the heavy-tailed trace, then the same trace under least-outstanding, the cure:
    the plant's effect is what the cure took off the tail (the round-robin run's tail TTFT over the
    control's). A draw whose cure takes off less than the diagnosis's least effect had an imbalance
    that did not make its tail, and counts apart as faint (bench/diagnosis_family.py)."""
    trace = heavy_trace(tmp / f"{name}-trace.jsonl", p)

    def run(run_name: str, policy: str) -> Path:
        args = ["--model", "tiny-test", "--data-parallel-size", "2", "--lb-policy", policy]
        args += [f"--engine-arg=--max-num-seqs={p['max_num_seqs']}", "--workload", "trace", "--dataset", str(trace)]
        return run_embedded(tmp, run_name, [*args, "--block-size", "16", "--probes", "server,host,tcp"])

    out = run(name, "round-robin")
    control = run(f"{name}-control-least-outstanding", "least-outstanding")
    planted, cured = tail_ttft_s(out), tail_ttft_s(control)
    if planted is not None and cured:
        res.effect = round(planted / cured, 2)
        res.notes.append(f"tail TTFT {planted * 1e3:.0f} ms round robin, {cured * 1e3:.0f} ms least-outstanding")
    return out


def run_fleet_draw(tmp: Path, d, res: CaseResult) -> Path:
    name = f"draw{d.index:02d}-{d.cause}"
    if d.cause == "hot-replica":
        return _hot_replica(tmp, name, d.params)
    if d.cause == "fleet-imbalance":
        return _imbalance(tmp, name, d.params, res)
    return run_embedded(tmp, name, d.args)
