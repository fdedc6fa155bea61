"""Do two ranks on one host stream weights as fast as one? The decode bias of `llmdiag plan` under PP.

A decode step at a few rows reads every weight once: its linears run at the rate memory delivers
them, not at the FMA rate. Under pipeline parallelism on one host the stages alternate at one
request (a stage streams alone) and overlap from two batches in flight (both stream at once and
share the host's memory bandwidth); `llmdiag plan` prices both cases alike, from tables measured by
one process alone, and charges a batch one step overhead, on the driver. This measures what that
leaves out, on the `tiny` model's weights (8 layers of qkv, o, gate_up and down and the LM head,
378 MB in float32, several times the last-level cache):

1. the chain of those linears at one row through refengine's CPU linear (packed oneDNN), torch on
   one thread: one process alone on one core, then two processes at once, one per core, and one
   process on both cores with two threads: the time per chain and the bytes per second it implies;
2. refengine's own engine at PP2 (offline, `LLMEngine`, one thread per rank) in a closed loop of 1
   and of 4 requests, beside TP1 at 4: TPOT, how the driver's time splits between submitting a
   batch (stage 0) and waiting for the last stage's tokens, and each rank's forward time per batch;
   at 4 requests again with the stages taking turns (one batch of 4 rows at a time, no two stages
   computing at once), so the cost of overlapping shows beside the rows a batch holds.

    python bench/weight_streaming.py --out bench/weight_streaming.json     # about a minute on 2 cores
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import machine, matmul_peak  # noqa: E402
from bench.linears_vs_vllm import tiny_shapes  # noqa: E402


def chain_seconds(threads: int, rounds: int) -> float:
    """Median seconds of one pass over the tiny model's linears at one row (runs in a child process)."""
    import torch

    from refengine.model.layers import cpu_gemm

    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(*s, generator=gen) * 0.02 for s in tiny_shapes()]
    caches = [cpu_gemm.PackedWeight() for _ in weights]
    x = torch.randn(1, max(k for _, k in tiny_shapes()), generator=gen)
    times = []
    with torch.inference_mode():
        for r in range(rounds + 2):
            t = time.perf_counter()
            for w, c in zip(weights, caches):
                cpu_gemm.linear(x[:, : w.shape[1]], w, None, c)
            if r >= 2:  # the first passes pack the weights
                times.append(time.perf_counter() - t)
    return statistics.median(times)


def weight_bytes() -> int:
    return 4 * sum(n * k for n, k in tiny_shapes())


def run_children(specs: list[tuple[str, int]], rounds: int) -> list[float]:
    """Children started together, each `(cores, threads)`; their median chain seconds."""
    procs = [
        subprocess.Popen(
            ["taskset", "-c", cores, sys.executable, __file__, "--child", str(threads), "--rounds", str(rounds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for cores, threads in specs
    ]
    return [float(p.communicate()[0].strip().splitlines()[-1]) for p in procs]


def _pp_schedule(pp: int, turns: bool) -> dict:
    """The engine arguments of one arm, named either way (`auto` on CPU would already take turns)."""
    if pp == 1:
        return {}
    if turns:
        return {"pipeline_schedule": "micro-batch", "pipeline_micro_batches": 1}
    return {"pipeline_schedule": "batch-queue"}


def engine_tpot(pp: int, users: int, seconds: float, turns: bool = False) -> dict:
    """refengine offline in a closed loop: TPOT, and (PP) the driver's submit/collect split per batch.
    `turns`: the stages take turns (the micro-batch schedule with one micro-batch: a step's batch goes
    through stage 0, then stage 1, and the next step starts after it), so no two stages compute at once."""
    from refengine.config import EngineArgs
    from refengine.distributed import executor
    from refengine.engine import LLMEngine
    from refengine.sampling_params import SamplingParams

    split = {"submit_s": 0.0, "collect_s": 0.0, "batches": 0, "rows": 0}
    submit, collect = executor.DistributedExecutor.submit, executor.DistributedExecutor.collect

    def timed_submit(self, sched):
        t = time.perf_counter()
        out = submit(self, sched)
        split["submit_s"] += time.perf_counter() - t
        split["batches"] += 1
        split["rows"] += len(sched.requests)
        return out

    def timed_collect(self, pending):
        t = time.perf_counter()
        out = collect(self, pending)
        split["collect_s"] += time.perf_counter() - t
        return out

    executor.DistributedExecutor.submit, executor.DistributedExecutor.collect = timed_submit, timed_collect
    schedule = _pp_schedule(pp, turns)
    engine = LLMEngine(EngineArgs(model="tiny", max_model_len=1024, pipeline_parallel_size=pp, **schedule))
    params = SamplingParams(max_tokens=64, ignore_eos=True, temperature=0.0)
    ids, sent, tpots = itertools.count(), {}, []

    def send() -> None:
        i = next(ids)
        engine.add_request([(7 * i + 13 * t) % 500 + 10 for t in range(128)], params, request_id=str(i))
        sent[str(i)] = [time.perf_counter(), None]

    def loop(duration: float, record: bool) -> None:
        t_end = time.perf_counter() + duration
        while time.perf_counter() < t_end:
            for out in engine.step():
                times = sent[out.request_id]
                if times[1] is None:
                    times[1] = time.perf_counter()
                if out.finished:
                    if record and times[0] >= t_window:
                        tpots.append((time.perf_counter() - times[1]) / 63)
                    send()

    for _ in range(users):
        send()
    loop(seconds / 3, False)
    for key in split:
        split[key] = 0
    ranks = engine.executor.collect_stats() if pp > 1 else []
    t_window = time.perf_counter()
    loop(seconds, True)
    after = engine.executor.collect_stats() if pp > 1 else []
    batches = max(1, split["batches"])
    per_rank = [
        {
            "rank": b["rank"],
            "forward_ms_per_batch": round(1e3 * (b["busy_s"] - a_["busy_s"]) / max(1, b["steps"] - a_["steps"]), 2),
            "step_ms_per_batch": round(1e3 * (b["wall_s"] - a_["wall_s"]) / max(1, b["steps"] - a_["steps"]), 2),
        }
        for a_, b in zip(ranks, after)
    ]
    return {
        "pp": pp,
        "users": users,
        "stages_take_turns": turns,
        "requests": len(tpots),
        "tpot_mean_ms": round(1e3 * statistics.mean(tpots), 2) if tpots else None,
        "rows_per_batch": round(split["rows"] / batches, 2) if pp > 1 and not turns else None,
        "submit_ms_per_batch": round(1e3 * split["submit_s"] / batches, 2) if pp > 1 and not turns else None,
        "collect_wait_ms_per_batch": round(1e3 * split["collect_s"] / batches, 2) if pp > 1 and not turns else None,
        # forward: the rank's model (and sampler) time; step: its whole part of a batch, waits included
        # (the driver's wall time is not kept per batch under the batch queue: 0 there)
        "ranks": per_rank,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15, help="passes over the weights per process")
    ap.add_argument("--seconds", type=float, default=12.0, help="measured seconds of each engine loop")
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--engine", default="", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.child:
        print(chain_seconds(a.child, a.rounds))
        return
    if a.engine:
        pp, users, turns = (int(x) for x in a.engine.split(","))
        print(json.dumps(engine_tpot(pp, users, a.seconds, bool(turns))), flush=True)
        os._exit(0)  # the ranks' sockets close with the process
    mb = weight_bytes() / 1e6
    alone = run_children([("0", 1)], a.rounds)[0]
    pair = run_children([("0", 1), ("1", 1)], a.rounds)
    both = run_children([("0,1", 2)], a.rounds)[0]
    streaming = {
        "weight_mb": round(mb, 1),
        "one_core_alone_ms": round(1e3 * alone, 2),
        "two_cores_at_once_ms": [round(1e3 * t, 2) for t in pair],
        "two_threads_one_process_ms": round(1e3 * both, 2),
        "gb_s": {
            "one core alone": round(mb / 1e3 / alone, 1),
            "two cores at once (sum)": round(sum(mb / 1e3 / t for t in pair), 1),
            "two threads": round(mb / 1e3 / both, 1),
        },
    }
    engines = []
    # (2, 4) twice: with two batches in flight (the batch queue: both stages compute at once), and with
    # the stages taking turns (one batch of 4 rows at a time): what overlapping costs each stage.
    for pp, users, turns in ((1, 4, 0), (2, 1, 0), (2, 4, 0), (2, 4, 1)):
        p = subprocess.run(
            [sys.executable, __file__, "--engine", f"{pp},{users},{turns}", "--seconds", str(a.seconds)],
            capture_output=True,
            text=True,
        )
        engines.append(json.loads(p.stdout.strip().splitlines()[-1]))
    out = {
        "command": " ".join(["python", *sys.argv]),
        "host": machine(),
        "matmul_f32_gflops": round(max(matmul_peak([(2048, 1024, 1024)]).values()) / 1e9, 1),
        "streaming": streaming,
        "engine": engines,
    }
    print(json.dumps(out["streaming"], indent=1))
    for e in engines:
        print(e)
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
