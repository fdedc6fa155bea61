"""What each CPU decode-path choice buys refengine, side by side in one process, float32 and bfloat16.

One `tiny` engine per dtype; for each decode batch every arm is measured in turn, in alternating
order (ABC CBA ...), and the median step of each arm counts:

- defaults: the engine as it ships;
- packed from 2 rows (float32): every float32 linear of two or more rows on oneDNN's packed path,
  as before the measured crossover (`cpu_gemm.plain_float32_rows` pinned to 1);
- kernel on torch's threads (float32): the C++ paged decode kernel split over torch's thread count
  at any size, as before `cpu_paged_decode.MIN_BYTES_PER_THREAD`;
- PyTorch decode attention (bfloat16): the decodes' attention on the PyTorch path (whole blocks
  gathered, then SDPA), as before the C++ kernel read bfloat16 caches;
- eager layer ops: RMSNorm with its residual add, RoPE and SiLU x up as PyTorch op chains, as
  before the C++ layer ops (`cpu_layer_ops.ENABLED` off).

Arms that do not apply to a dtype are not run for it.

    python bench/cpu_decode_paths.py [--dtypes float32,bfloat16] [--batches 1,2,3,4,16,64]
                                     [--prompt 256] [--reps 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from common import machine, matmul_peak, print_table, write_json  # noqa: E402
from cpu_bfloat16 import decode_step_s  # noqa: E402  (the same decode step, measured the same way)

from refengine import LLM  # noqa: E402
from refengine.kernels import cpu_layer_ops, cpu_paged_decode  # noqa: E402
from refengine.model.layers import cpu_gemm  # noqa: E402
from refengine.numerics.cpu_bfloat16 import cpu_computes_bfloat16  # noqa: E402

ARMS = {
    "float32": ("defaults", "packed from 2 rows", "kernel on torch's threads", "eager layer ops"),
    "bfloat16": ("defaults", "PyTorch decode attention", "eager layer ops"),
}


@contextmanager
def arm(name: str):
    rows, per_thread, kernel, layer_ops = (
        cpu_gemm.plain_float32_rows,
        cpu_paged_decode.MIN_BYTES_PER_THREAD,
        cpu_paged_decode.ENABLED,
        cpu_layer_ops.ENABLED,
    )
    if name == "packed from 2 rows":
        cpu_gemm.plain_float32_rows = lambda: 1
    elif name == "kernel on torch's threads":
        cpu_paged_decode.MIN_BYTES_PER_THREAD = 1
    elif name == "PyTorch decode attention":
        cpu_paged_decode.ENABLED = False
    elif name == "eager layer ops":
        cpu_layer_ops.ENABLED = False
    try:
        yield
    finally:
        cpu_gemm.plain_float32_rows, cpu_paged_decode.MIN_BYTES_PER_THREAD = rows, per_thread
        cpu_paged_decode.ENABLED, cpu_layer_ops.ENABLED = kernel, layer_ops


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtypes", default="float32,bfloat16", type=lambda s: s.split(","))
    p.add_argument("--batches", default="1,2,3,4,16,64", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--prompt", type=int, default=256)
    p.add_argument("--reps", type=int, default=4, help="measurements per arm and batch, in alternating order")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    rows, samples = [], {}
    for dtype in a.dtypes:
        if dtype == "bfloat16" and not cpu_computes_bfloat16():
            print("bfloat16 skipped: this CPU does not compute it natively (no AVX-512 BF16 or AMX)")
            continue
        arms = ARMS[dtype]
        engine = LLM(model="tiny", dtype=dtype, max_model_len=1024, max_num_seqs=128).llm_engine
        rng = random.Random(0)
        decode_step_s(engine, 2, 64, rng)  # warm-up (and the float32 crossover's one-time probe)
        for rep in range(a.reps):
            for batch in a.batches:
                for name in arms if rep % 2 == 0 else tuple(reversed(arms)):
                    with arm(name):
                        samples.setdefault(f"{dtype}|{batch}|{name}", []).append(
                            decode_step_s(engine, batch, a.prompt, rng)
                        )
        for batch in a.batches:
            med = {n: statistics.median(samples[f"{dtype}|{batch}|{n}"]) * 1e3 for n in arms}
            rows.append({"dtype": dtype, "batch": batch, "prompt": a.prompt, "median_ms": med})
        print_table(
            f"tiny, {dtype}, {a.prompt}-token prompts: median decode step ms ({a.reps} per arm, alternating; "
            f"torch threads {torch.get_num_threads()}; float32 rows to F.linear: {cpu_gemm.plain_float32_rows()})",
            ["batch", *arms],
            [[str(r["batch"]), *(f"{r['median_ms'][n]:.1f}" for n in arms)] for r in rows if r["dtype"] == dtype],
        )
        del engine
    write_json(
        a.out,
        {
            "bench": "cpu_decode_paths",
            "args": vars(a),
            "machine": machine(),
            # the host's float32 matmul rate on this process's threads, measured after the arms
            "matmul_peak": matmul_peak([(2048, 1024, 1024)]),
            "plain_float32_rows": cpu_gemm.plain_float32_rows(),
            "rows": rows,
            "samples_s": samples,
        },
    )


if __name__ == "__main__":
    main()
