"""What the CPU paged prefill kernel buys refengine, side by side in one process, float32 and bfloat16.

Two parts, each arm measured in turn in alternating order (AB BA ...), fastest of each counted:

- attention alone, one layer of `tiny` (16 query heads, 4 KV heads, head size 64) at prompt lengths
  --lengths: PyTorch's SDPA over the gathered context (the path before the kernel) against
  `cpu_paged_prefill.paged_prefill_cpu` reading the paged cache in place, with the largest difference
  between the two outputs;
- the engine's prefill step (`tiny`, the offline LLMEngine, prompts of --prompts, one step that
  prefills them all) with the kernel on and off (`cpu_paged_prefill.ENABLED`).

Run it pinned to the cores you mean (`taskset -c 0` for one), nothing else running.

    python bench/cpu_prefill_attention.py [--lengths 64,256,512,1024,2048] [--prompts 1x256,8x256,1x512]
                                          [--reps 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.common import machine, matmul_peak, print_table, write_json  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 16, 4, 64, 16


def _timed(f) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def attention_alone(length: int, dtype: torch.dtype, reps: int) -> dict:
    from refengine.attention.metadata import build_attention_metadata
    from refengine.attention.reference import paged_attention, store_kv
    from refengine.kernels import cpu_paged_prefill

    g = torch.Generator().manual_seed(length)
    blocks = list(range(-(-length // BLOCK)))
    random.Random(length).shuffle(blocks)
    cache = torch.zeros(2, len(blocks), BLOCK, KV_HEADS, HEAD_DIM, dtype=dtype)
    meta = build_attention_metadata([(0, length, blocks)], BLOCK)
    kv = torch.randn(2, length, KV_HEADS * HEAD_DIM, generator=g)
    store_kv(kv[0], kv[1], cache, meta.slot_mapping)
    q = torch.randn(length, HEADS * HEAD_DIM, generator=g).to(dtype)
    scale = HEAD_DIM**-0.5

    def sdpa():
        return paged_attention(q, cache, meta, HEADS, scale)

    def kernel():
        return cpu_paged_prefill.paged_prefill_cpu(q, cache, meta.prefill_block_tables, meta.prefill_rows, HEADS, scale)

    arms = {"sdpa": sdpa, "kernel": kernel}
    best = {name: float("inf") for name in arms}
    for name in arms:
        arms[name]()  # warm
    for r in range(reps):
        for name in arms if r % 2 == 0 else reversed(list(arms)):
            best[name] = min(best[name], _timed(arms[name]))
    err = (sdpa().float() - kernel()).abs().max().item()
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "length": length,
        "sdpa_ms": round(1e3 * best["sdpa"], 3),
        "kernel_ms": round(1e3 * best["kernel"], 3),
        "speedup": round(best["sdpa"] / best["kernel"], 2),
        "max_abs_diff": err,
    }


def prefill_step(dtype: str, prompts: list[tuple[int, int]], reps: int) -> list[dict]:
    from refengine.config import EngineArgs
    from refengine.engine import LLMEngine
    from refengine.kernels import cpu_paged_prefill
    from refengine.sampling_params import SamplingParams

    engine = LLMEngine(
        EngineArgs(
            model="tiny", dtype=dtype, max_model_len=4096, enable_prefix_caching=False, max_num_batched_tokens=8192
        )
    )
    rng = random.Random(0)
    vocab = engine.model_config.vocab_size
    rows = []
    for count, length in prompts:

        def step(on: bool) -> float:
            cpu_paged_prefill.ENABLED = on
            for _request in range(count):
                ids = [rng.randrange(3, vocab) for _ in range(length)]
                engine.add_request(ids, SamplingParams(max_tokens=1, ignore_eos=True), request_id=f"r{rng.random()}")
            t = _timed(engine.step)
            while engine.has_unfinished_requests():
                engine.step()
            return t

        step(True), step(False)  # warm both paths at this shape
        best = {True: float("inf"), False: float("inf")}
        for r in range(reps):
            for on in (True, False) if r % 2 == 0 else (False, True):
                best[on] = min(best[on], step(on))
        cpu_paged_prefill.ENABLED = True
        rows.append(
            {
                "dtype": dtype,
                "prompts": f"{count}x{length}",
                "step_sdpa_ms": round(1e3 * best[False], 1),
                "step_kernel_ms": round(1e3 * best[True], 1),
                "speedup": round(best[False] / best[True], 3),
            }
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="64,256,512,1024,2048")
    p.add_argument("--prompts", default="1x256,8x256,1x512", help="COUNTxLENGTH, comma-separated")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    dtypes = a.dtypes.split(",")
    # The host's float32 matmul rate on the same threads, for the RESULTS line above the table.
    matmul_gflops = round(max(matmul_peak([(256, 1024, 1024)]).values()) / 1e9, 1)
    alone = [attention_alone(int(n), getattr(torch, d), a.reps) for d in dtypes for n in a.lengths.split(",")]
    prompts = [tuple(int(x) for x in spec.split("x")) for spec in a.prompts.split(",")]
    steps = [row for d in dtypes for row in prefill_step(d, prompts, a.reps)]  # type: ignore[arg-type]
    print_table(
        f"one layer's prefill attention ({torch.get_num_threads()} torch threads)",
        ["dtype", "tokens", "SDPA ms", "kernel ms", "speedup", "max |diff|"],
        [
            [r["dtype"], r["length"], r["sdpa_ms"], r["kernel_ms"], r["speedup"], f"{r['max_abs_diff']:.1e}"]
            for r in alone
        ],
    )
    print_table(
        "the engine's prefill step (tiny)",
        ["dtype", "prompts", "SDPA ms", "kernel ms", "speedup"],
        [[r["dtype"], r["prompts"], r["step_sdpa_ms"], r["step_kernel_ms"], r["speedup"]] for r in steps],
    )
    write_json(
        a.out,
        {
            "command": "python bench/cpu_prefill_attention.py " + " ".join(sys.argv[1:]),
            "machine": machine(),
            "torch_threads": torch.get_num_threads(),
            "matmul_f32_gflops": matmul_gflops,
            "attention": alone,
            "prefill_step": steps,
        },
    )


if __name__ == "__main__":
    main()
