"""The CPU layer ops (refengine/kernels/cpu_layer_ops.py) against the PyTorch chains they replace, by size.

For each model width and row count, one layer's RMSNorm with its residual add, SiLU x up and RoPE of q
and k, each timed through the layer modules with the kernels on and off (alternating, the best of
two 30-call runs each), at the given torch thread counts. What it answers: where the one-threaded
kernels stop beating PyTorch's ops, which split a large tensor over their OpenMP team
(`cpu_layer_ops.applies` keeps the kernels to a decode's rows beyond the thread counts measured).

    python bench/layer_ops_sizes.py [--threads 1,2] [--rows 1,16,64,256,512,1024,2048] [--dtype float32]
                                    [--out bench/layer_ops_sizes.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.common import machine, matmul_peak, print_table, write_json  # noqa: E402
from refengine.kernels import cpu_layer_ops  # noqa: E402
from refengine.model.layers.activation import SiluAndMul  # noqa: E402
from refengine.model.layers.norm import RMSNorm  # noqa: E402
from refengine.model.layers.rotary import RotaryEmbedding  # noqa: E402

# (name, hidden, intermediate, heads, kv heads, head dim): the bundled models' widths
WIDTHS = (("tiny-test", 64, 176, 4, 2, 16), ("tiny", 1024, 2816, 16, 4, 64))
CALLS = 30


def _us(fn) -> tuple[float, float]:
    """(kernels, PyTorch) microseconds a call: each side twice, alternating, the best run of each."""
    runs: dict[bool, list[float]] = {True: [], False: []}
    for on in (True, False, True, False):
        cpu_layer_ops.ENABLED = on
        fn()
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        runs[on].append((time.perf_counter() - t0) / CALLS * 1e6)
    cpu_layer_ops.ENABLED = True
    return min(runs[True]), min(runs[False])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", default="1,2", help="torch thread counts, comma-separated")
    p.add_argument("--rows", default="1,16,64,256,512,1024,2048", help="rows (tokens in the step)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--out", default="bench/layer_ops_sizes.json")
    a = p.parse_args()
    if not cpu_layer_ops.LIBRARY.available():
        raise SystemExit("the CPU layer ops could not be built here (no C++ compiler?): nothing to compare")
    dtype = getattr(torch, a.dtype)
    # Every size is timed through the kernels, whatever applies() would choose.
    cpu_layer_ops.MAX_ROWS_BESIDE_MANY_THREADS = 1 << 30
    rows_out = []
    with torch.no_grad():
        for threads in (int(t) for t in a.threads.split(",")):
            torch.set_num_threads(threads)
            for name, hidden, inter, heads, kv_heads, head_dim in WIDTHS:
                norm, act = RMSNorm(hidden, 1e-5, params_dtype=dtype), SiluAndMul()
                rope = RotaryEmbedding(head_dim, 4096, 10000.0, None)
                for rows in (int(r) for r in a.rows.split(",")):
                    x, res = torch.randn(rows, hidden).to(dtype), torch.randn(rows, hidden).to(dtype)
                    gate_up = torch.randn(rows, 2 * inter).to(dtype)
                    qkv = torch.randn(rows, (heads + 2 * kv_heads) * head_dim).to(dtype)
                    q, k, _ = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
                    pos = torch.arange(rows)
                    ops = {
                        "add + RMSNorm": _us(lambda: norm(x, res)),
                        "SiLU x up": _us(lambda: act(gate_up)),
                        "RoPE q, k": _us(lambda: rope(pos, q, k)),
                    }
                    rows_out.append({"threads": threads, "model": name, "rows": rows, "us": ops})
    torch.set_num_threads(max(int(t) for t in a.threads.split(",")))
    print_table(
        f"CPU layer ops, {a.dtype}: kernels / PyTorch, microseconds a call (best of two runs of {CALLS})",
        ["torch threads", "widths of", "rows", "add + RMSNorm", "SiLU x up", "RoPE q, k"],
        [[r["threads"], r["model"], r["rows"], *(f"{k:.0f} / {e:.0f}" for k, e in r["us"].values())] for r in rows_out],
    )
    write_json(
        a.out,
        {
            "bench": "layer_ops_sizes",
            "args": vars(a),
            "machine": machine(),
            "matmul_peak": matmul_peak([(2048, 1024, 1024)]),  # float32, at the largest thread count
            "rows": rows_out,
        },
    )


if __name__ == "__main__":
    main()
