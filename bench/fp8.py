"""FP8 on CPU: tokens/s, memory and quality of fp32 vs FP8 weight-only vs FP8 KV (the `tiny` preset).

For each configuration, one engine with the same KV budget: weight bytes (as stored, unquantized,
and the CPU dequantized-weight cache), KV bytes per token and blocks in the budget, output
tokens/s on a seeded greedy workload, and the quality check against the fp32 engine (relative
KL, top-1, perplexity ratio, greedy agreement). One extra row runs FP8 weights with the CPU
cache turned off (dequantize on every call) to show why the cache is the CPU default.

    python bench/fp8.py [--quick] [--model tiny] [--json bench/fp8.json]

--quick checks the script end to end in a few minutes (four of the eight configurations, a small
workload, three prompts); the figures in bench/RESULTS.md come from the full run on a quiet machine
(about 15 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import CpuMeter, greedy, machine, make_workload, note, print_table, write_json

CONFIGS = [
    ("fp32", {}),
    ("fp8 weights (channel)", dict(quantization="fp8")),
    ("fp8 weights (block)", dict(quantization="fp8", fp8_weight_scales="block")),
    ("fp8 weights, qkv kept (seed fix)", dict(quantization="fp8", quantization_skip="seed")),
    ("fp8 KV", dict(kv_cache_dtype="fp8")),
    ("fp8 KV, calibrated scales", dict(kv_cache_dtype="fp8", calculate_kv_scales=True)),
    ("fp8 weights + fp8 KV", dict(quantization="fp8", kv_cache_dtype="fp8")),
    ("fp8 weights, no dequant cache", dict(quantization="fp8")),
]
FULL = dict(n=16, prompts=(64, 192), outputs=(64, 64), quality_prompts=12, greedy=32)
QUICK = dict(
    n=4,
    prompts=(16, 32),
    outputs=(8, 8),
    quality_prompts=3,
    greedy=8,
    configs=("fp32", "fp8 weights (channel)", "fp8 weights + fp8 KV", "fp8 weights, no dequant cache"),
)
KV_BUDGET = 256 << 20


def _disable_dequant_cache(llm) -> None:
    for m in llm.llm_engine.runner.model.modules():
        if hasattr(m, "fp8_cache_dequantized"):
            m.fp8_cache_dequantized, m.fp8_dequant_cache = False, None


def measure(model: str, name: str, kw: dict, ref, p: dict) -> tuple[dict, object]:
    from llmbench.quality.run import load_prompts, run_quality_check
    from refengine import LLM

    llm = LLM(model, kv_cache_memory_bytes=KV_BUDGET, max_model_len=1024, **kw)
    if name.endswith("no dequant cache"):
        _disable_dequant_cache(llm)
    mem = llm.llm_engine.quant_memory.as_dict()
    if name.endswith("no dequant cache"):
        mem["dequant_cache_bytes"] = 0
    reqs = make_workload(p["n"], p["prompts"], p["outputs"], seed=0)
    llm.generate([[7] * 16], greedy(2))  # warm-up (builds the CPU dequant cache), not timed
    with CpuMeter() as meter:
        outs = llm.generate([r.prompt for r in reqs], [greedy(r.max_tokens) for r in reqs])
    out_tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    row = {
        "config": name,
        "engine_args": kw,
        "output_tokens": out_tokens,
        "tok_s": out_tokens / meter.wall_s,
        **meter.as_dict(),
        "memory": mem,
        "policy": llm.llm_engine.quant.policy.as_dict(),
    }
    if ref is not None:
        q = run_quality_check(ref, llm, load_prompts(None)[: p["quality_prompts"]], greedy_tokens=p["greedy"])
        row["quality"] = q.as_dict()
    return row, llm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small workload: checks the script, not the figures")
    ap.add_argument("--model", default="tiny", help="preset or model directory (default: tiny)")
    ap.add_argument("--json", default=None, help="write the raw figures here")
    a = ap.parse_args()
    p = QUICK if a.quick else FULL
    rows, ref = [], None
    for name, kw in CONFIGS:
        if name not in p.get("configs", (name,)):
            continue
        note(f"measuring {name}")
        row, llm = measure(a.model, name, kw, ref, p)
        rows.append(row)
        if ref is None:
            ref = llm  # the fp32 engine is the quality reference for the rest
        else:
            del llm
            gc.collect()
    base = rows[0]
    mib = 1 << 20
    table = []
    for r in rows:
        m, q = r["memory"], r.get("quality")
        table.append(
            [
                r["config"],
                f"{r['tok_s']:.1f}",
                f"{r['tok_s'] / base['tok_s']:.2f}x",
                f"{m['weight_bytes'] / mib:.0f}",
                f"{m['dequant_cache_bytes'] / mib:.0f}",
                f"{m['kv_bytes_per_token']}",
                f"{m['num_kv_blocks']} ({m['num_kv_blocks'] / m['num_kv_blocks_unquantized']:.0f}x)",
                "-" if q is None else f"{q['relative_kl']:.4f}",
                "-" if q is None else f"{q['mean_kl']:.2e}",
                "-" if q is None else f"{q['top1_agreement']:.3f}",
                "-" if q is None else f"{q['ppl_ratio']:.4f}",
                "-" if q is None else f"{q['greedy_match_mean']:.1f}/{q['greedy_tokens']}",
                "-" if q is None else ("pass" if q["passed"] else "FAIL"),
                f"{r['other_cpus']:.2f}",
            ]
        )
    print_table(
        f"FP8 on CPU, {a.model} ({'quick' if a.quick else 'full'}; KV budget {KV_BUDGET // mib} MiB)",
        [
            "config",
            "out tok/s",
            "vs fp32",
            "weights MiB",
            "+CPU cache MiB",
            "KV B/token",
            "KV blocks",
            "KL/info",
            "mean KL",
            "top-1",
            "ppl ratio",
            "greedy",
            "quality",
            "others' CPUs",
        ],
        table,
    )
    write_json(a.json, {"machine": machine(), "params": p, "rows": rows})


if __name__ == "__main__":
    main()
