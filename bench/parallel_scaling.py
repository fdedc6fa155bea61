"""Tensor and pipeline parallelism on CPU: throughput, communication per step, pipeline bubble.

On the `tiny` preset (float32, gloo, ranks spawned on this machine), one seeded workload runs
through (1) one process, (2) TP 2, (3) PP 2 with 2 micro-batches per step, (4) PP 2 with the
batch queue (vLLM's schedule: 2 scheduled batches in flight across steps); for each: output
tokens/s, steps, and the seconds per step each rank spends inside torch.distributed calls
(all_reduce, all_gather, send, recv; waiting for peers included). Then PP 2 at 1, 2, 4 and 8
micro-batches and with the batch queue: the measured bubble, 1 - (compute summed over stages) /
(stages x step wall time; under the batch queue: wall time with a batch in the pipeline), next to
the formula (PP - 1) / (PP + MB - 1) (docs/yardsticks.md; none for the batch queue, whose steady
state has no per-step drain). Under the batch queue the driver only posts isend/irecv, which are
not timed, so its comm column reads ~0; the last stage's recv still shows its waiting.

CPU threads: one process uses all cores; each of N ranks gets cores // N (the engine's choice).
On a 2-core machine TP 2 does the same FLOPs on the same cores plus the all-reduces, so any gain
over one process is not parallel compute: it is one 2-thread OpenMP process's synchronization on
small decode ops traded for two single-threaded ranks that meet only at the collectives. The
point is the communication cost and the bubble, measured.

    python bench/parallel_scaling.py [--quick] [--json bench/parallel_scaling.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

import torch

from refengine import LLM, SamplingParams

FULL = dict(n=16, prompt=128, output=64, mbs=(1, 2, 4, 8))
QUICK = dict(n=4, prompt=16, output=4, mbs=(1, 2))


def workload(cfg: dict, vocab: int = 4096) -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(7, vocab) for _ in range(cfg["prompt"])] for _ in range(cfg["n"])]


def engine_kwargs(cfg: dict, **layout) -> dict:
    blocks = cfg["n"] * (-(-(cfg["prompt"] + cfg["output"]) // 16)) + 16
    return dict(max_model_len=cfg["prompt"] + cfg["output"] + 16, num_gpu_blocks_override=blocks, seed=0, **layout)


def _delta(after: list[dict], before: list[dict]) -> list[dict]:
    out = []
    for a, b in zip(after, before):
        d = {k: a[k] - b[k] for k in ("steps", "busy_s", "wall_s", "comm_s")}
        d.update(rank=a["rank"], pp_rank=a["pp_rank"], tp_rank=a["tp_rank"])
        out.append(d)
    return out


def run_layout(name: str, cfg: dict, prompts, **layout) -> dict:
    llm = LLM(model="tiny", **engine_kwargs(cfg, **layout))
    engine = llm.llm_engine
    ex = engine.executor
    sp = SamplingParams(max_tokens=cfg["output"], temperature=0, ignore_eos=True)
    try:
        llm.generate(prompts[:2], SamplingParams(max_tokens=2, temperature=0, ignore_eos=True))  # warm-up
        distributed = ex.world_size > 1
        if distributed:
            ex.enable_comm_timer(True)
            before, wall0, steps0 = ex.collect_stats(), ex.step_wall_s, ex.steps
        steps_before = engine.num_steps
        t0 = time.perf_counter()
        outs = llm.generate(prompts, sp)
        wall = time.perf_counter() - t0
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        row = {
            "layout": name,
            "ranks": ex.world_size,
            "threads_per_rank": torch.get_num_threads(),  # as run
            "output_tokens": tokens,
            "wall_s": wall,
            "tok_s": tokens / wall,
            "token_ids": [o.outputs[0].token_ids for o in outs],
        }
        if distributed:
            ranks = _delta(ex.collect_stats(), before)
            steps, step_wall = ex.steps - steps0, ex.step_wall_s - wall0
            pp = layout.get("pipeline_parallel_size", 1)
            busy = sum(r["busy_s"] for r in ranks if r["tp_rank"] == 0)
            row.update(
                steps=steps,
                step_wall_ms=1e3 * step_wall / steps,
                comm_ms_per_step=[round(1e3 * r["comm_s"] / max(1, r["steps"]), 3) for r in ranks],
                busy_ms_per_step=[round(1e3 * r["busy_s"] / max(1, r["steps"]), 3) for r in ranks],
            )
            if pp > 1 and layout.get("pipeline_schedule") == "batch-queue":
                row.update(
                    micro_batches="batch queue",
                    bubble_measured=max(0.0, 1 - busy / (pp * step_wall)),
                    bubble_formula=None,
                )
            elif pp > 1:
                mb = min(layout.get("pipeline_micro_batches") or pp, cfg["n"])
                row.update(
                    micro_batches=mb,
                    bubble_measured=max(0.0, 1 - busy / (pp * step_wall)),
                    bubble_formula=(pp - 1) / (pp + mb - 1),
                )
        else:
            steps = engine.num_steps - steps_before
            row.update(steps=steps, step_wall_ms=1e3 * wall / steps)
        return row
    finally:
        engine.shutdown()


def print_rows(rows: list[dict]) -> None:
    print(
        f"{'layout':<10}{'ranks':>6}{'threads/rank':>13}{'tok/s':>9}{'steps':>7}{'step ms':>9}  comm ms/step per rank"
    )
    for r in rows:
        print(
            f"{r['layout']:<10}{r['ranks']:>6}{r['threads_per_rank']:>13}{r['tok_s']:>9.1f}{r['steps']:>7}"
            f"{r['step_wall_ms']:>9.2f}  {r.get('comm_ms_per_step', '-')}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small workload: checks the script works, measures nothing")
    ap.add_argument("--json", default=None, help="write the raw figures here")
    args = ap.parse_args()
    cfg = QUICK if args.quick else FULL
    prompts = workload(cfg)
    print(
        f"tiny preset, {cfg['n']} requests x {cfg['prompt']} prompt tokens -> {cfg['output']} output tokens, "
        f"greedy; {os.cpu_count()} CPUs"
    )
    rows = [
        run_layout("TP1 PP1", cfg, prompts),
        run_layout("TP2", cfg, prompts, tensor_parallel_size=2),
        run_layout(
            "PP2 MB2", cfg, prompts, pipeline_parallel_size=2, pipeline_micro_batches=2, pipeline_schedule="micro-batch"
        ),
        run_layout("PP2 BQ", cfg, prompts, pipeline_parallel_size=2, pipeline_schedule="batch-queue"),
    ]
    same = all(r["token_ids"] == rows[0]["token_ids"] for r in rows)
    print_rows(rows)
    print(f"greedy tokens identical across layouts: {same}")
    bubbles = [
        run_layout(
            f"PP2 MB{mb}",
            cfg,
            prompts,
            pipeline_parallel_size=2,
            pipeline_micro_batches=mb,
            pipeline_schedule="micro-batch",
        )
        for mb in cfg["mbs"]
    ]
    bubbles.append(rows[-1])  # the batch-queue arm, measured above
    print(f"\n{'PP schedule':>14}{'measured bubble':>17}{'(PP-1)/(PP+MB-1)':>18}{'tok/s':>9}{'steps':>7}")
    for b in bubbles:
        formula = "-" if b["bubble_formula"] is None else f"{b['bubble_formula']:.3f}"
        print(f"{b['micro_batches']:>14}{b['bubble_measured']:>17.3f}{formula:>18}{b['tok_s']:>9.1f}{b['steps']:>7}")
    if args.json:
        for r in rows + bubbles:
            r.pop("token_ids", None)
        with open(args.json, "w") as f:
            json.dump({"config": cfg, "layouts": rows, "bubble": bubbles, "tokens_identical": same}, f, indent=1)


if __name__ == "__main__":
    main()
