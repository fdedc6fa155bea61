"""The Triton kernels and the W8A8 GEMM on a lent GPU: correctness, bandwidth, TFLOP/s.

1. Correctness: each kernel against its PyTorch oracle at production shapes (max abs error).
2. Paged-decode attention bandwidth: KV bytes read / kernel time, as a share of this device's
   measured copy bandwidth (a large device-to-device copy: bytes read + written / time).
   Target: >= 60% at long contexts. The PyTorch path's time is printed next to it.
3. W8A8 GEMM: torch._scaled_mm (FP8 x FP8, row-wise scales) TFLOP/s against bf16 torch.matmul,
   with and without the per-token activation quantization that the engine adds.

    python bench/gpu/kernels.py [--quick] [--json bench/gpu/kernels.json]

Needs CUDA (and compute capability 8.9+ for part 3); about a minute on an H100/H200.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from refengine.attention.metadata import build_attention_metadata
from refengine.attention.reference import paged_attention
from refengine.model.layers.attention import allocate_kv_caches
from refengine.numerics.fp8 import FP8_DTYPE, dequantize, quantize_blocks, quantize_per_channel


def bench_ms(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=10, rep=50))


def copy_bandwidth() -> float:
    """Bytes/s of a 1 GiB device-to-device copy (read + write)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = bench_ms(lambda: dst.copy_(src))
    return 2 * src.numel() / (ms / 1e3)


class Cfg:
    num_hidden_layers, num_key_value_heads, head_dim = 1, 8, 128


def decode_case(batch: int, ctx: int, cache_dtype, bs: int = 16, heads: int = 32):
    nb = batch * (-(-ctx // bs))
    cache = allocate_kv_caches(Cfg, nb, bs, torch.bfloat16, "cuda")[0]
    cache.normal_()
    if cache_dtype == FP8_DTYPE:
        cache = cache.to(FP8_DTYPE)
    perm = torch.randperm(nb).tolist()
    per = nb // batch
    seqs = [(ctx - 1, 1, perm[i * per : (i + 1) * per]) for i in range(batch)]
    meta = build_attention_metadata(seqs, bs, "cuda")
    q = torch.randn(batch, heads * 128, device="cuda", dtype=torch.bfloat16)
    return q, cache, meta


def part_decode(copy_bw: float, quick: bool) -> list[dict]:
    from refengine.kernels.dispatch import choose_num_splits
    from refengine.kernels.paged_decode import paged_decode_attention

    rows = []
    shapes = (
        [(1, 4096), (8, 16384)]
        if quick
        else [(1, 1024), (1, 8192), (1, 32768), (8, 4096), (8, 32768), (32, 8192), (64, 2048)]
    )
    for cache_dtype in (torch.bfloat16, FP8_DTYPE):
        for batch, ctx in shapes:
            q, cache, meta = decode_case(batch, ctx, cache_dtype)
            splits = choose_num_splits(batch, 8, ctx, q.device)

            def run():
                return paged_decode_attention(
                    q, cache, meta.block_tables, meta.seq_lens, 32, 128**-0.5, num_splits=splits
                )

            err = float((run().float() - paged_attention(q.float(), cache, meta, 32, 128**-0.5)).abs().max())
            ms = bench_ms(run)
            torch_ms = bench_ms(lambda: paged_attention(q, cache, meta, 32, 128**-0.5))
            kv_bytes = batch * ctx * 2 * 8 * 128 * cache.element_size()
            bw = kv_bytes / (ms / 1e3)
            rows.append(
                {
                    "kv": str(cache_dtype).replace("torch.", ""),
                    "batch": batch,
                    "context": ctx,
                    "splits": splits,
                    "max_abs_err": err,
                    "ms": ms,
                    "torch_ms": torch_ms,
                    "GB_s": bw / 1e9,
                    "share_of_copy_bw": bw / copy_bw,
                }
            )
            del q, cache, meta
    return rows


def part_correctness() -> list[dict]:
    from refengine.attention.reference import store_kv
    from refengine.kernels.fp8_dequant import fp8_dequantize_triton
    from refengine.kernels.kv_store import store_kv_triton

    rows = []
    w = torch.randn(4096, 4096, device="cuda") * 0.02
    for kind, (w8, s, b) in {"channel": (*quantize_per_channel(w), 128), "block": (*quantize_blocks(w), 128)}.items():
        err = float((fp8_dequantize_triton(w8, s, torch.float32, b) - dequantize(w8, s, torch.float32, b)).abs().max())
        rows.append({"kernel": f"fp8 dequant ({kind})", "max_abs_err": err})
    for dt in (torch.bfloat16, FP8_DTYPE):
        caches = [allocate_kv_caches(Cfg, 256, 16, dt, "cuda")[0] for _ in range(2)]
        k, v = torch.randn(2048, 1024, device="cuda"), torch.randn(2048, 1024, device="cuda")
        slots = torch.randperm(256 * 16, device="cuda")[:2048]
        store_kv(k, v, caches[0], slots, 0.05, 0.05)
        store_kv_triton(k, v, caches[1], slots, 0.05, 0.05)
        same = torch.equal(caches[0].view(torch.uint8), caches[1].view(torch.uint8))
        rows.append(
            {
                "kernel": f"kv store ({str(dt).replace('torch.', '')})",
                "max_abs_err": 0.0 if same else float((caches[0].float() - caches[1].float()).abs().max()),
            }
        )
    return rows


def part_gemm(quick: bool) -> list[dict]:
    from refengine.numerics.fp8 import quantize_per_token
    from refengine.quant.fp8_matmul import w8a8_linear, w8a8_supported

    if not w8a8_supported(torch.device("cuda")):
        return [{"note": "no FP8 tensor cores (compute capability < 8.9): W8A8 not measured"}]
    rows = []
    shapes = (
        [(4096, 4096, 4096)]
        if quick
        else [
            (16, 4096, 4096),
            (256, 4096, 4096),
            (4096, 4096, 4096),
            (4096, 14336, 4096),
            (4096, 4096, 14336),
            (8192, 8192, 8192),
        ]
    )
    for m, n, k in shapes:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
        w8, ws = quantize_per_channel(w.float())
        x8, xs = quantize_per_token(x)
        flops = 2 * m * n * k
        bf16_ms = bench_ms(lambda: x @ w.t())
        mm_ms = bench_ms(
            lambda: torch._scaled_mm(
                x8, w8.t(), scale_a=xs, scale_b=ws.reshape(1, -1).contiguous(), out_dtype=torch.bfloat16
            )
        )
        full_ms = bench_ms(lambda: w8a8_linear(x, w8, ws, None))
        ref = x.float() @ dequantize(w8, ws).t()
        rel = float((w8a8_linear(x, w8, ws, None).float() - ref).norm() / ref.norm())
        rows.append(
            {
                "m": m,
                "n": n,
                "k": k,
                "bf16_tflops": flops / bf16_ms / 1e9,
                "fp8_gemm_tflops": flops / mm_ms / 1e9,
                "fp8_with_act_quant_tflops": flops / full_ms / 1e9,
                "speedup": bf16_ms / mm_ms,
                "rel_err": rel,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer shapes")
    ap.add_argument("--json", default=None, help="write the raw figures here")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/gpu/kernels.py needs a CUDA GPU; run it where one is lent")
    from rich.console import Console
    from rich.table import Table

    con = Console(width=160)
    dev = torch.cuda.get_device_name()
    copy_bw = copy_bandwidth()
    con.print(
        f"{dev}, capability {torch.cuda.get_device_capability()}, torch {torch.__version__}; "
        f"measured copy bandwidth {copy_bw / 1e9:.0f} GB/s"
    )
    corr = part_correctness()
    decode = part_decode(copy_bw, a.quick)
    gemm = part_gemm(a.quick)
    t = Table(title="kernel correctness (vs PyTorch oracle)")
    t.add_column("kernel"), t.add_column("max abs err")
    for r in corr:
        t.add_row(r["kernel"], f"{r['max_abs_err']:.3g}")
    con.print(t)
    t = Table(title="paged-decode attention (32 q heads, 8 KV heads, head dim 128, block 16)")
    for c in ("KV", "batch", "context", "splits", "err", "Triton ms", "PyTorch ms", "GB/s", "% of copy BW"):
        t.add_column(c)
    for r in decode:
        t.add_row(
            r["kv"],
            str(r["batch"]),
            str(r["context"]),
            str(r["splits"]),
            f"{r['max_abs_err']:.2g}",
            f"{r['ms']:.3f}",
            f"{r['torch_ms']:.3f}",
            f"{r['GB_s']:.0f}",
            f"{100 * r['share_of_copy_bw']:.0f}%",
        )
    con.print(t)
    t = Table(title="W8A8 GEMM (FP8 row-wise scales) vs bf16")
    for c in ("M", "N", "K", "bf16 TFLOP/s", "FP8 GEMM TFLOP/s", "FP8 + act quant", "speedup", "rel err"):
        t.add_column(c)
    for r in gemm:
        if "note" in r:
            con.print(r["note"])
            continue
        t.add_row(
            str(r["m"]),
            str(r["n"]),
            str(r["k"]),
            f"{r['bf16_tflops']:.0f}",
            f"{r['fp8_gemm_tflops']:.0f}",
            f"{r['fp8_with_act_quant_tflops']:.0f}",
            f"{r['speedup']:.2f}x",
            f"{r['rel_err']:.3f}",
        )
    con.print(t)
    long_ctx = [r["share_of_copy_bw"] for r in decode if r["context"] >= 8192]
    if long_ctx:
        best = max(long_ctx)
        con.print(
            f"paged decode at contexts >= 8192: best {100 * best:.0f}% of copy bandwidth "
            f"(target >= 60%: {'met' if best >= 0.6 else 'MISSED'})"
        )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {"device": dev, "copy_GB_s": copy_bw / 1e9, "correctness": corr, "decode": decode, "gemm": gemm},
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
