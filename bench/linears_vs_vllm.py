"""The same linears (bfloat16 or float32) through refengine's path and through vLLM's, side by side in one process.

refengine's CPU linears go through torch's oneDNN ops with the weight packed once
(`torch.ops.mkldnn._reorder_linear_weight` + `_linear_pointwise`: oneDNN's inner-product primitive;
refengine/model/layers/cpu_gemm.py). vLLM's CPU backend calls oneDNN's matmul primitive through its
own extension (`vllm._custom_ops.create_onednn_mm` / `onednn_mm`). Both link oneDNN; this measures
what the choice of primitive and wrapper costs, on the 33 weights of the `tiny` model's decode step
(8 layers of qkv, o, gate_up, down, and the LM head), chained as a step chains them, at a few row
counts (a decode batch's rows, or a prefill's tokens: 512 or 2,048 rows, in float32 the prefill-heavy
steps' case): each arm in turn, alternating order, the median chain of each.

It needs vLLM's own package, so the measuring half runs in vLLM's virtual environment (the one
bench/vs_vllm.py and tests/realengines use, installed on first use), pinned to one core, torch on one
thread; this process starts it and writes the JSON:

    python bench/linears_vs_vllm.py [--rows 1,4,16,64] [--dtype bfloat16] [--rounds 11] [--core 0] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARMS = ("torch packed (refengine)", "vLLM onednn_mm", "F.linear")


def tiny_shapes() -> list[tuple[int, int]]:
    """[out, in] of the `tiny` preset's decode-step linears (hidden 1,024, 16 heads and 4 KV heads of
    64, intermediate 2,816, vocab 4,096; refengine/model/tiny.py), in the order a step runs them."""
    hidden, heads, kv_heads, head_dim, inter, vocab, layers = 1024, 16, 4, 64, 2816, 4096, 8
    layer = [
        ((heads + 2 * kv_heads) * head_dim, hidden),
        (hidden, heads * head_dim),
        (2 * inter, hidden),
        (hidden, inter),
    ]
    return layer * layers + [(vocab, hidden)]


def measure(rows: list[int], rounds: int, dtype_name: str) -> dict:
    """Runs in vLLM's environment: every arm at every row count, alternating order."""
    import statistics
    import time

    import torch
    import torch.nn.functional as F
    from vllm import _custom_ops as ops

    torch.set_num_threads(1)
    dtype = getattr(torch, dtype_name)
    gen = torch.Generator().manual_seed(0)
    weights = [(torch.randn(*s, generator=gen) * 0.02).to(dtype) for s in tiny_shapes()]
    packed = [torch.ops.mkldnn._reorder_linear_weight(w, None) for w in weights]
    handlers = [ops.create_onednn_mm(w.t(), 32) for w in weights]  # as vLLM's CPU linear builds them

    def chain(arm: str, x: torch.Tensor) -> None:
        for i, w in enumerate(weights):
            xi = x[:, : w.shape[1]].contiguous()
            if arm == ARMS[0]:
                torch.ops.mkldnn._linear_pointwise(xi, packed[i], None, "none", [], "")
            elif arm == ARMS[1]:
                ops.onednn_mm(handlers[i], xi, None)
            else:
                F.linear(xi, w)

    out = {}
    x0 = torch.randn(1, 2816, generator=gen).to(dtype)
    with torch.no_grad():
        # the two paths agree before they are timed: the same product, to the dtype's rounding
        a = torch.ops.mkldnn._linear_pointwise(x0[:, :1024].contiguous(), packed[0], None, "none", [], "")
        b = ops.onednn_mm(handlers[0], x0[:, :1024].contiguous(), None)
        if not torch.allclose(a.float(), b.float(), atol=2e-2, rtol=2e-2):
            raise SystemExit("torch's packed linear and vLLM's onednn_mm disagree on the same weight")
        for m in rows:
            x = torch.randn(m, 2816, generator=gen).to(dtype)
            samples: dict[str, list[float]] = {a: [] for a in ARMS}
            for arm in ARMS:
                chain(arm, x)  # first call: oneDNN builds its primitive
            for r in range(rounds):
                for arm in ARMS if r % 2 == 0 else tuple(reversed(ARMS)):
                    t = time.perf_counter()
                    chain(arm, x)
                    samples[arm].append(time.perf_counter() - t)
            out[str(m)] = {a: statistics.median(v) for a, v in samples.items()}
        gflops = 0.0
        xa, wa = torch.randn(2048, 1024), torch.randn(1024, 1024)
        F.linear(xa, wa)
        for _ in range(10):
            t = time.perf_counter()
            F.linear(xa, wa)
            gflops = max(gflops, 2 * 2048 * 1024 * 1024 / (time.perf_counter() - t) / 1e9)
    import vllm

    return {
        "median_chain_s": out,
        "samples_per_arm": rounds,
        "matmul_f32_gflops_one_thread": round(gflops, 1),
        "torch": torch.__version__,
        "vllm": vllm.__version__,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default="1,4,16,64", help="row counts (decode batch sizes), comma-separated")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"), help="the weights' and rows' dtype")
    p.add_argument("--rounds", type=int, default=11, help="chains per arm and row count, in alternating order")
    p.add_argument("--core", type=int, default=0, help="the core the measuring process is pinned to")
    p.add_argument("--out", default="bench/linears_vs_vllm.json")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    rows = [int(r) for r in a.rows.split(",")]
    if a.child:
        print(json.dumps(measure(rows, a.rounds, a.dtype)))
        return
    sys.path.insert(0, str(ROOT / "bench"))
    sys.path.insert(0, str(ROOT / "tests" / "realengines"))
    from cores import cpu_model
    from engine_venv import VLLM, engine_python

    python = engine_python(VLLM)
    cmd = [
        *("taskset", "-c", str(a.core), str(python), __file__, "--child"),
        *("--rows", a.rows, "--rounds", str(a.rounds), "--dtype", a.dtype),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd="/tmp")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result.update(bench="linears_vs_vllm", args=vars(a), cpu_model=cpu_model(), shapes=tiny_shapes())
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"`python bench/linears_vs_vllm.py --rows {a.rows} --dtype {a.dtype} --rounds {a.rounds} --core {a.core}`; host {cpu_model()}, "
        f"float32 matmul {result['matmul_f32_gflops_one_thread']} GFLOP/s on one thread; torch {result['torch']}, "
        f"vLLM {result['vllm']}\n"
    )
    print("| rows | " + " | ".join(f"{arm} ms" for arm in ARMS) + " | refengine / vLLM |")
    print("|---" * (len(ARMS) + 2) + "|")
    for m, med in result["median_chain_s"].items():
        ratio = med[ARMS[0]] / med[ARMS[1]]
        print(f"| {m} | " + " | ".join(f"{med[arm] * 1e3:.2f}" for arm in ARMS) + f" | {ratio:.2f} |")
    print(f"\nJSON: {a.out}")


if __name__ == "__main__":
    main()
