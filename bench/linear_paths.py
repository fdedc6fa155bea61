"""The CPU linear paths side by side at decode and prefill row counts, in one process (issue 26).

The `tiny` model's 32 decoder linears (8 layers of qkv, o, gate_up, down), chained as a step runs
them, at each row count, through each path refengine chooses between (model/layers/cpu_gemm.py):

- float32: oneDNN's inner product on the weight packed once, and F.linear (MKL's sgemm on the plain
  weight). Which wins at many rows depends on the host: oneDNN on AVX-512 and AMX hosts, MKL from a
  few hundred rows on an AVX2 AMD EPYC (Zen 3). The engine measures its crossovers at start.
- bfloat16 on a CPU without native bfloat16 (AVX2): F.linear in bfloat16 (which converts, and whose
  time grows with each row as a product of vectors would), against the weight packed in float32 with
  the rows widened and the output rounded back (what the engine runs from two rows).

Each arm in turn, alternating order, the median chain of each; pinned to one core and torch on one
thread, as a served engine on `taskset -c 0` runs:

    taskset -c 0 python bench/linear_paths.py --rows 1,2,4,16,64,128,256,512,1024 --out bench/linear_paths.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine, matmul_peak, print_table, write_json
from refengine.model.layers.cpu_gemm import packed_linear, reorder
from refengine.numerics import cpu_bfloat16

# [out, in] of the `tiny` preset's decoder linears (refengine/model/tiny.py), one layer's, times 8.
LAYER = [((16 + 2 * 4) * 64, 1024), (1024, 16 * 64), (2 * 2816, 1024), (1024, 2816)]


def arms(weights: list[torch.Tensor]) -> dict:
    """Name -> (dtype of the rows, one linear: (x, i) -> y) for the paths worth comparing here."""
    f32 = [w.float() for w in weights]
    f32_packed = [reorder(w) for w in f32]
    out = {
        "float32 packed (oneDNN)": (torch.float32, lambda x, i: packed_linear(x, f32_packed[i], None)),
        "float32 F.linear (MKL)": (torch.float32, lambda x, i: F.linear(x, f32[i])),
    }
    bf16 = [w.bfloat16() for w in weights]
    if cpu_bfloat16.cpu_computes_bfloat16():
        bf16_packed = [reorder(w) for w in bf16]
        out["bfloat16 packed (native)"] = (torch.bfloat16, lambda x, i: packed_linear(x, bf16_packed[i], None))
    else:  # the rows widened, the output rounded back (packed_linear's bfloat16-through-float32 path)
        out["bfloat16 packed in float32"] = (torch.bfloat16, lambda x, i: packed_linear(x, f32_packed[i], None))
    out["bfloat16 F.linear"] = (torch.bfloat16, lambda x, i: F.linear(x, bf16[i]))
    return out


def measure(rows: list[int], rounds: int) -> dict:
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(*shape, generator=gen) * 0.02 for shape in LAYER * 8]
    paths = arms(weights)
    out: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        for m in rows:
            inputs = {k: torch.randn(m, k, generator=gen) for k in (1024, 2816)}
            cast = {dt: {k: v.to(dt) for k, v in inputs.items()} for dt in (torch.float32, torch.bfloat16)}

            def chain(name: str) -> None:
                dtype, fn = paths[name]
                for i, w in enumerate(weights):
                    fn(cast[dtype][w.shape[1]], i)

            samples: dict[str, list[float]] = {name: [] for name in paths}
            for name in paths:
                chain(name)  # first call: oneDNN builds its primitive
            for r in range(rounds):
                for name in paths if r % 2 == 0 else reversed(list(paths)):
                    t = time.perf_counter()
                    chain(name)
                    samples[name].append(time.perf_counter() - t)
            out[str(m)] = {name: statistics.median(v) for name, v in samples.items()}
            print(f"{m} rows: " + ", ".join(f"{n} {1e3 * s:.1f} ms" for n, s in out[str(m)].items()), flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default="1,2,4,16,64,128,256,512,1024", help="row counts, comma-separated")
    p.add_argument("--rounds", type=int, default=5, help="chains per path and row count, in alternating order")
    p.add_argument("--out", default=None, help="write the JSON here")
    a = p.parse_args()
    torch.set_num_threads(1)
    rows = [int(r) for r in a.rows.split(",")]
    peak = matmul_peak([(2048, 1024, 1024)])
    chains = measure(rows, a.rounds)
    names = list(next(iter(chains.values())))
    print_table(
        "the tiny model's 32 decoder linears chained, median ms",
        ["rows", *names],
        [[r, *(f"{1e3 * chains[r][n]:.1f}" for n in names)] for r in chains],
    )
    write_json(
        a.out,
        {
            "command": " ".join(sys.argv),
            "host": machine(),
            "matmul_peak": peak,
            "torch_threads": torch.get_num_threads(),
            "native_bfloat16": cpu_bfloat16.cpu_computes_bfloat16(),
            "median_chain_s": chains,
        },
    )


if __name__ == "__main__":
    main()
