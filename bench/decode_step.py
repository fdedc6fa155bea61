"""Decode and prefill MFU of the engine's CPU paths, each change on and off, side by side in one run.

The machine is shared with other work, so every figure here is taken interleaved: one engine,
64 running sequences (prompts 32-512, seeded as in engine_throughput.py), and for each repetition
every configuration takes one warm-up step and one timed step in turn, next to a measurement of
the matmul peak; the best of the repetitions counts (contention only ever adds time). MFU divides
a step's FLOPs (common.model_flops: linears, attention over the real context, the LM head rows)
by the best matmul rate of the run: F.linear and the oneDNN-packed linear at the model's shapes,
2,048 and 64 rows, whichever is faster.

Configurations (the switches are module flags read at every call):
- before: F.linear, decode attention on the PyTorch reference (padded gather + SDPA);
- packed gemm: refengine/model/layers/cpu_gemm.py on;
- decode kernel: refengine/kernels/cpu_paged_decode.py on;
- both (the engine's defaults).

    python bench/decode_step.py [--reps 8] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (
    CpuMeter,
    StepRecorder,
    greedy,
    machine,
    make_workload,
    model_flops,
    print_table,
    step_flops,
    write_json,
)

CONFIGS = {
    "before (F.linear, gather + SDPA)": (False, False),
    "packed gemm": (True, False),
    "decode kernel": (False, True),
    "both (defaults)": (True, True),
}
MM_SHAPES = [(5632, 1024), (1024, 2816), (1536, 1024), (1024, 1024)]


def set_config(packed: bool, kernel: bool) -> None:
    from refengine.kernels import cpu_paged_decode
    from refengine.model.layers import cpu_gemm

    cpu_gemm.ENABLED, cpu_paged_decode.ENABLED = packed, kernel


CLOCK = time.perf_counter


def matmul_rates() -> dict:
    """One pass over the model's shapes at 2,048 and 64 rows, F.linear and packed: FLOP/s each."""
    from refengine.model.layers import cpu_gemm

    out = {}
    for rows in (2048, 64):
        for n, k in MM_SHAPES:
            x, w = torch.randn(rows, k), torch.randn(n, k)
            cache = cpu_gemm.PackedWeight()
            for name, f in (
                ("F.linear", lambda: F.linear(x, w)),
                ("packed", lambda: cpu_gemm.linear(x, w, None, cache)),
            ):
                cpu_gemm.ENABLED = True
                f()
                reps = 1 if rows == 2048 else 10
                t = CLOCK()
                for _ in range(reps):
                    f()
                out[f"{name} {rows}x{k} @ {n}x{k}"] = reps * 2 * rows * n * k / (CLOCK() - t)
    return out


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--prefill-reps", type=int, default=2)
    ap.add_argument("--seqs", type=int, default=64)
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: one torch thread, steps and matmuls timed in this process's CPU seconds (a "
        "per-core MFU that other tenants of a shared machine barely move)",
    )
    ap.add_argument("--json", default=None)
    return ap.parse_args()


def _prefill_steps(eng, rec: StepRecorder, reps: int, cpu_clock: bool) -> dict[str, list]:
    """Prefill: 4 prompts x 512 tokens in one step, per configuration; repetition 0 is one warm-up."""
    rng = random.Random(1)
    prefill: dict[str, list] = {c: [] for c in CONFIGS}
    for rep in range(reps + 1):
        for name, flags in CONFIGS.items():
            if rep == 0 and name != "both (defaults)":
                continue  # one warm-up prefill is enough
            set_config(*flags)
            rec.records, rec.enabled = [], rep > 0
            for _ in range(4):
                eng.add_request([rng.randrange(7, 4096) for _ in range(512)], greedy(1))
            while eng.has_unfinished_requests():
                n, t = len(rec.records), CLOCK()
                eng.step()
                if cpu_clock and len(rec.records) > n:
                    rec.records[-1].total_s = CLOCK() - t
            prefill[name] += [r for r in rec.records if r.num_decode == 0 and r.num_tokens == 2048]
            rec.enabled = False
        print(f"prefill rep {rep} done", flush=True)
    return prefill


def _fill_decode_batch(eng, seqs: int) -> None:
    """Add `seqs` requests and step until all of them run with their prompts computed: pure decode steps."""
    for r in make_workload(seqs, (32, 512), (16, 256), seed=0):
        eng.add_request(r.prompt, greedy(1000))
    sch = eng.scheduler
    set_config(True, True)
    while not (len(sch.running) == seqs and all(q.num_computed_tokens >= q.num_prompt_tokens for q in sch.running)):
        eng.step()


def _decode_steps(eng, rec: StepRecorder, reps: int, seqs: int, cpu_clock: bool) -> tuple[dict, dict]:
    """Per repetition: the matmul peak, then one warm-up and one timed decode step per configuration."""
    decode: dict[str, list] = {c: [] for c in CONFIGS}
    peaks: dict[str, float] = {}
    for rep in range(reps):
        for k, v in matmul_rates().items():
            peaks[k] = max(peaks.get(k, 0.0), v)
        for name, flags in CONFIGS.items():
            set_config(*flags)
            rec.enabled = False
            eng.step()  # warm-up: the first call of a switched path pays its one-time costs
            rec.records, rec.enabled = [], True
            t = CLOCK()
            eng.step()
            spent = CLOCK() - t
            for r in rec.records:
                r.total_s = spent if cpu_clock else r.total_s
            decode[name] += [r for r in rec.records if r.num_decode == r.num_tokens == seqs]
        print(
            f"decode rep {rep}: " + ", ".join(f"{k} {v[-1].total_s:.3f} s" for k, v in decode.items() if v), flush=True
        )
    return decode, peaks


def _figures(rs: list, coef, peak: float) -> dict:
    """The best step of a configuration (contention only ever adds time) and its MFU."""
    best = min(rs, key=lambda r: r.total_s)
    fl = step_flops(best, coef)
    return dict(
        best_s=best.total_s,
        median_s=statistics.median(r.total_s for r in rs),
        gflop=fl / 1e9,
        gflops=fl / best.total_s / 1e9,
        mfu=fl / best.total_s / peak,
        samples=len(rs),
    )


def _report(args: argparse.Namespace, other_cpus: float, coef, prefill: dict, decode: dict, peaks: dict) -> None:
    peak = max(peaks.values())
    res = dict(
        machine=machine(),
        clock=args.clock,
        threads=torch.get_num_threads(),
        seqs=args.seqs,
        reps=args.reps,
        other_cpus=other_cpus,
        matmul_flops=peaks,
        peak_flops=peak,
        prefill={},
        decode={},
    )
    rows = []
    for kind, recs in (("prefill 2048", prefill), (f"decode@{args.seqs}", decode)):
        for name, rs in recs.items():
            d = _figures(rs, coef, peak)
            res["prefill" if kind.startswith("prefill") else "decode"][name] = d
            rows.append(
                [
                    kind,
                    name,
                    f"{d['best_s'] * 1e3:.0f}",
                    f"{d['median_s'] * 1e3:.0f}",
                    f"{d['gflops']:.1f}",
                    f"{d['mfu']:.1%}",
                    d["samples"],
                ]
            )
    print_table(
        f"MFU against the run's best matmul rate {peak / 1e9:.1f} GFLOP/s (others used "
        f"{res['other_cpus']:.2f} CPUs meanwhile)",
        ["step", "configuration", "best ms", "median ms", "GFLOP/s", "MFU (best)", "samples"],
        rows,
    )
    print_table(
        "Matmul rates (best of the run)", ["shape", "GFLOP/s"], [[k, f"{v / 1e9:.1f}"] for k, v in peaks.items()]
    )
    write_json(args.json, res)


def main() -> None:
    args = _parse_args()
    global CLOCK
    cpu_clock = args.clock == "cpu"
    if cpu_clock:
        torch.set_num_threads(1)
        CLOCK = time.process_time
    from refengine import LLM

    llm = LLM("tiny", max_num_seqs=max(64, args.seqs))
    eng = llm.llm_engine
    coef = model_flops(eng.model_config)
    rec = StepRecorder(eng)
    rec.enabled = False
    with CpuMeter() as meter:
        prefill = _prefill_steps(eng, rec, args.prefill_reps, cpu_clock)
        _fill_decode_batch(eng, args.seqs)
        decode, peaks = _decode_steps(eng, rec, args.reps, args.seqs, cpu_clock)
    set_config(True, True)
    _report(args, meter.as_dict()["other_cpus"], coef, prefill, decode, peaks)


if __name__ == "__main__":
    main()
