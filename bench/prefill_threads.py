"""When a prompt's prefill attention pays for a second thread inside the engine, by model shape and length.

The CPU paged prefill kernel starts its threads per call, beside torch's OpenMP workers that spin on
the cores after each op (refengine/kernels/cpu_paged_prefill.py). Alone, two threads nearly halve a
call; inside the engine the second thread waits for a core, and a short call is slower split than
whole. This bench measures both arms where it matters, in the engine: one prefill step of one prompt
(LLMEngine.step, the offline engine, prefix caching off), the kernel held at 1 thread or at 2, the
arms alternating (A B B A ...), and reports each arm's median and P90 step and kernel time (all
layers), the call's work (query-key pairs x query heads x head size) and the threads the engine's
rule (`threads_for`) gives it.

Models: the built-in `tiny-test` (4 heads of 16), `tiny` (16 of 64) and bench/plan_accuracy.py's
random Llama (8 of 64, no GQA). Run it alone, on every core torch uses (the rule is about 2 threads).

    python bench/prefill_threads.py [--models tiny-test,random,tiny] [--lengths 128,256,512,1024,2048]
                                    [--reps 12] [--out FILE]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.common import machine, matmul_peak, print_table, write_json  # noqa: E402
from bench.plan_accuracy import _model_path  # noqa: E402


def _engine(model: str, work: Path):
    from refengine.config import EngineArgs
    from refengine.engine import LLMEngine

    return LLMEngine(
        EngineArgs(
            model=_model_path(model, work), max_model_len=4096, enable_prefix_caching=False, max_num_batched_tokens=8192
        )
    )


def measure(model: str, lengths: list[int], reps: int, work_dir: Path) -> list[dict]:
    from refengine.kernels import cpu_paged_prefill as kernel
    from refengine.sampling_params import SamplingParams

    engine = _engine(model, work_dir)
    cfg = engine.model_config
    heads, head_dim = cfg.num_attention_heads, cfg.head_dim
    call = kernel.paged_prefill_cpu
    kernel_s: list[float] = []

    def timed_call(*a, **kw):
        t = time.perf_counter()
        out = call(*a, **kw)
        kernel_s.append(time.perf_counter() - t)
        return out

    kernel.paged_prefill_cpu = timed_call  # the attention layer calls it through the module
    rng = random.Random(0)
    rows = []
    try:
        for length in lengths:

            def step(threads: int) -> tuple[float, float]:
                ids = [rng.randrange(3, cfg.vocab_size) for _ in range(length)]
                engine.add_request(ids, SamplingParams(max_tokens=1, ignore_eos=True), request_id=f"r{rng.random()}")
                kernel_s.clear()
                with kernel.held_threads(threads):
                    t = time.perf_counter()
                    engine.step()
                    wall = time.perf_counter() - t
                while engine.has_unfinished_requests():
                    engine.step()
                return wall, sum(kernel_s)

            step(1), step(2)  # warm both arms at this shape
            times: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
            for r in range(reps):
                for threads in (1, 2) if r % 2 == 0 else (2, 1):
                    times[threads].append(step(threads))
            work = kernel.prefill_work(torch.tensor([[0, length, 0]]), heads, head_dim)
            row: dict = {"model": model, "heads": heads, "head_dim": head_dim, "length": length, "work": work}
            for threads, samples in times.items():
                walls, kernels = np.array(samples).T * 1e3
                row[f"step_ms_{threads}"] = round(float(statistics.median(walls)), 2)
                row[f"step_p90_ms_{threads}"] = round(float(np.percentile(walls, 90)), 2)
                row[f"kernel_ms_{threads}"] = round(float(statistics.median(kernels)), 2)
            row["two_threads_gain"] = round(float(row["step_ms_1"] / row["step_ms_2"] - 1), 3)  # > 0: splitting pays
            row["rule_threads"] = kernel.threads_for(work)
            rows.append(row)
            print(row, flush=True)
    finally:
        kernel.paged_prefill_cpu = call
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny-test,random,tiny")
    ap.add_argument("--lengths", default="128,256,512,1024,2048")
    ap.add_argument("--reps", type=int, default=12, help="steps per arm and length (alternating)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from refengine.kernels import cpu_paged_prefill

    if torch.get_num_threads() < 2 or not cpu_paged_prefill.LIBRARY.available():
        raise SystemExit("needs the CPU prefill kernel and at least 2 torch threads")
    lengths = [int(x) for x in args.lengths.split(",")]
    peak = matmul_peak([(2048, 4096, 4096)])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            rows += measure(model, lengths, args.reps, Path(tmp))
    print_table(
        f"one prompt's prefill step in the engine, kernel at 1 or 2 threads (median of {args.reps}; "
        f"rule: split at >= 2 x {cpu_paged_prefill.MIN_WORK_PER_THREAD:,} of work)",
        ["model", "length", "work", "step 1 thr ms", "step 2 thr ms", "2 thr gain", "kernel 1 / 2 ms", "rule"],
        [
            [
                r["model"],
                r["length"],
                f"2^{np.log2(r['work']):.0f}",
                r["step_ms_1"],
                r["step_ms_2"],
                f"{r['two_threads_gain']:+.0%}",
                f"{r['kernel_ms_1']} / {r['kernel_ms_2']}",
                r["rule_threads"],
            ]
            for r in rows
        ],
    )
    write_json(
        args.out,
        {"bench": "prefill_threads", "args": vars(args), "machine": machine(), "matmul_peak": peak, "rows": rows},
    )


if __name__ == "__main__":
    main()
