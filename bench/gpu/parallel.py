"""Where a GPU machine is lent: the TP/PP/EP equality checks on NCCL (with more than one GPU) and
the single-GPU engine benchmark, as one short script that prints a table.

1. Equality (needs >= 2 GPUs; skipped with a note otherwise): tiny random Llama and Mixtral
   checkpoints in HF format, float32, greedy tokens of TP 2, PP 2 (2 micro-batches) and EP 2
   (all-to-all on NCCL) against one GPU. Rank k uses cuda:k; the control group stays on gloo.
2. Benchmark: the `tiny` preset on one GPU (bfloat16, the default there): output tokens/s for
   a seeded workload; with >= 2 GPUs also TP 2 and PP 2, with communication ms per step.

    python bench/gpu/parallel.py [--quick] [--json out.json]
    python bench/gpu/parallel.py --quick --cpu-dry-run   # the same code paths on CPU/gloo (no figures)

Runs in a few minutes on one H100/H200-class GPU (--quick: under one).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time

import torch

DEVICE = {"device": "cuda", "backend": "nccl"}  # --cpu-dry-run: cpu / gloo


def random_checkpoints(root: str) -> dict[str, str]:
    from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    common = dict(
        vocab_size=250,
        hidden_size=64,
        intermediate_size=96,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.08,
    )
    dirs = {"llama": f"{root}/llama", "mixtral": f"{root}/mixtral"}
    LlamaForCausalLM(LlamaConfig(num_hidden_layers=4, **common)).save_pretrained(dirs["llama"])
    MixtralForCausalLM(
        MixtralConfig(num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2, **common)
    ).save_pretrained(dirs["mixtral"])
    return dirs


def greedy_tokens(model: str, **kw) -> list[list[int]]:
    from refengine import LLM, SamplingParams

    llm = LLM(
        model=model,
        device=DEVICE["device"],
        dtype="float32",
        max_model_len=128,
        num_gpu_blocks_override=64,
        block_size=4,
        seed=0,
        **kw,
    )
    try:
        prompts = [[5 + i, 17, 42 + 3 * i, 7] * (1 + i % 3) for i in range(6)]
        outs = llm.generate(prompts, SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))
        return [o.outputs[0].token_ids for o in outs]
    finally:
        llm.llm_engine.shutdown()


def equality_rows(n_gpus: int) -> list[dict]:
    if n_gpus < 2:
        return [{"check": "TP2 / PP2 / EP2 equality on NCCL", "result": f"skipped: {n_gpus} GPU visible, needs 2"}]
    rows = []
    with tempfile.TemporaryDirectory() as root:
        dirs = random_checkpoints(root)
        cases = [
            ("TP2 llama", "llama", dict(tensor_parallel_size=2)),
            ("PP2 MB2 llama", "llama", dict(pipeline_parallel_size=2, pipeline_micro_batches=2)),
            ("TP2 mixtral (sharded experts)", "mixtral", dict(tensor_parallel_size=2)),
            ("EP2 mixtral (all_to_all)", "mixtral", dict(tensor_parallel_size=2, enable_expert_parallel=True)),
        ]
        want = {name: greedy_tokens(path) for name, path in dirs.items()}
        for label, model, layout in cases:
            t = time.perf_counter()
            got = greedy_tokens(dirs[model], distributed_backend=DEVICE["backend"], **layout)
            rows.append(
                {
                    "check": f"{label} == 1 GPU (greedy)",
                    "result": "equal" if got == want[model] else "DIFFERENT",
                    "seconds": round(time.perf_counter() - t, 1),
                }
            )
    return rows


def bench(n: int, prompt: int, output: int, **layout) -> dict:
    from refengine import LLM, SamplingParams

    rng = random.Random(0)
    prompts = [[rng.randrange(7, 4096) for _ in range(prompt)] for _ in range(n)]
    llm = LLM(
        model="tiny",
        device=DEVICE["device"],
        max_model_len=prompt + output + 16,
        seed=0,
        num_gpu_blocks_override=n * (-(-(prompt + output) // 16)) + 16,
        **layout,
    )
    engine = llm.llm_engine
    try:
        llm.generate(prompts[:2], SamplingParams(max_tokens=2, temperature=0, ignore_eos=True))  # warm-up
        timed = engine.executor.world_size > 1
        if timed:
            engine.executor.enable_comm_timer(True)
        if DEVICE["device"] == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        outs = llm.generate(prompts, SamplingParams(max_tokens=output, temperature=0, ignore_eos=True))
        wall = time.perf_counter() - t
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        short = {"tensor_parallel_size": "TP", "pipeline_parallel_size": "PP"}
        row = {
            "layout": " x ".join(f"{short[k]}{v}" for k, v in layout.items()) or "1 GPU",
            "tok_s": round(tokens / wall, 1),
            "wall_s": round(wall, 2),
            "dtype": str(engine.dtype),
        }
        if timed:
            stats = engine.executor.collect_stats()
            row["comm_ms_per_step"] = [round(1e3 * s["comm_s"] / max(1, s["steps"]), 3) for s in stats]
        return row
    finally:
        engine.shutdown()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--cpu-dry-run",
        action="store_true",
        help="run the same code on CPU with gloo, as if 2 devices existed: checks the script, measures nothing",
    )
    args = ap.parse_args()
    if args.cpu_dry_run:
        DEVICE.update(device="cpu", backend="gloo")
        n_gpus = 2
        print("CPU dry run (gloo): these are not GPU figures")
    elif not torch.cuda.is_available():
        print("no CUDA GPU visible: nothing to do here (the CPU figures come from bench/parallel_scaling.py)")
        return 0
    else:
        n_gpus = torch.cuda.device_count()
        print(f"{n_gpus} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    checks = equality_rows(n_gpus)
    n, prompt, output = (8, 64, 16) if args.quick else (64, 256, 128)
    benches = [bench(n, prompt, output)]
    if n_gpus >= 2:
        benches += [
            bench(n, prompt, output, tensor_parallel_size=2),
            bench(n, prompt, output, pipeline_parallel_size=2),
        ]
    print(f"\n{'check':<50}result")
    for r in checks:
        print(f"{r['check']:<50}{r['result']}")
    print(f"\ntiny preset, {n} requests x {prompt} prompt -> {output} output tokens, greedy")
    print(f"{'layout':<12}{'dtype':<16}{'tok/s':>9}{'wall s':>9}  comm ms/step per rank")
    for b in benches:
        print(f"{b['layout']:<12}{b['dtype']:<16}{b['tok_s']:>9}{b['wall_s']:>9}  {b.get('comm_ms_per_step', '-')}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpus": n_gpus, "checks": checks, "bench": benches}, f, indent=1)
    return 0 if all(r["result"] != "DIFFERENT" for r in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
