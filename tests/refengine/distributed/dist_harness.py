"""Run fixed steps on real gloo ranks and on one process, capturing the sampler's logits.

Each spawned rank joins a 2-rank world through a TCPStore on an OS-picked port, then for every
case builds its part of the model with the engine's own code (`build_runner`), runs the same
SchedulerOutputs (prefills, a chunked prefill, decodes; block tables included) and, on the
sampler rank, saves the logits it sampled from. The reference runs the one-process runner.
"""

from __future__ import annotations

import datetime
import os
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from refengine.config import EngineArgs
from refengine.core.outputs import ScheduledRequest, SchedulerOutput
from refengine.distributed.parallel_state import init_process_groups
from refengine.distributed.worker import WorkerSpec, build_runner
from refengine.model.hf_config import load_model_config
from refengine.model.layers.attention import allocate_kv_caches
from refengine.model.layers.moe import MoEParallel
from refengine.model.loader import load_model
from refengine.parallel.layout import ParallelConfig
from refengine.runner.model_runner import ModelRunner
from refengine.sampling_params import SamplingParams

BLOCK_SIZE, NUM_BLOCKS = 4, 64


def make_steps(vocab: int) -> list[SchedulerOutput]:
    g = torch.Generator().manual_seed(7)
    a, b, c = (torch.randint(4, vocab, (n,), generator=g).tolist() for n in (9, 12, 3))
    greedy = SamplingParams(temperature=0, max_tokens=100)

    def req(rid, toks, start, blocks, sample=True):
        return ScheduledRequest(rid, toks, start, blocks, sample, greedy)

    return [
        SchedulerOutput(
            1, [req("a", a[:8], 0, [0, 1]), req("b", b[:5], 0, [2, 3, 4], sample=False), req("c", c, 0, [5])]
        ),
        SchedulerOutput(
            2, [req("a", a[8:9], 8, [0, 1, 6]), req("b", b[5:], 5, [2, 3, 4]), req("c", [a[0]], 3, [5, 7])]
        ),
        SchedulerOutput(
            3, [req("a", [b[0]], 9, [0, 1, 6]), req("b", [c[1]], 12, [2, 3, 4, 8]), req("c", [c[2]], 4, [5, 7])]
        ),
    ]


def run_steps(runner, steps) -> list[torch.Tensor]:
    """Per step, the logits of its sampling rows (request order); empty list off the sampler rank."""
    captured: list[torch.Tensor] = []
    original = runner.sampler.__class__.__call__

    def capture(sampler, logits, rows):
        captured.append(logits.detach().clone())
        return original(sampler, logits, rows)

    runner.sampler.__class__ = type("CapturingSampler", (runner.sampler.__class__,), {"__call__": capture})
    out = []
    for step in steps:
        captured.clear()
        runner.execute_model(step)
        out.append(torch.cat(captured) if captured else None)
    return out if runner.samples else []


def reference_logits(model_dir: str, capacity_factor: float = 0.0, device: str = "cpu"):
    cfg = load_model_config(model_dir)
    extra = {"moe": MoEParallel(capacity_factor=capacity_factor)} if cfg.num_experts else {}
    model = load_model(model_dir, cfg, torch.float32, device, **extra)
    kv = allocate_kv_caches(cfg, NUM_BLOCKS, BLOCK_SIZE, torch.float32, device)
    runner = ModelRunner(model, kv, BLOCK_SIZE, torch.device(device), seed=0)
    logits = run_steps(runner, make_steps(cfg.vocab_size))
    stats = model.moe_stats() if cfg.num_experts else None
    return logits, stats


def _rank_main(
    rank: int, world: int, port: int, cases: list[tuple[str, str, dict]], out_dir: str, device_type: str, backend: str
) -> None:
    try:
        os.environ["LOCAL_RANK"] = str(rank)
        torch.set_num_threads(1)
        store = dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=datetime.timedelta(seconds=60))
        for name, model_dir, layout in cases:
            pc = ParallelConfig(**layout)
            groups = init_process_groups(pc, rank, store, backend, device_type)
            cfg = load_model_config(model_dir)
            spec = WorkerSpec(
                EngineArgs(model=model_dir, block_size=BLOCK_SIZE), model_dir, torch.float32, device_type, NUM_BLOCKS
            )
            runner = build_runner(spec, cfg, pc, groups)
            logits = run_steps(runner, make_steps(cfg.vocab_size))
            stats = runner.model.moe_stats() if cfg.num_experts else None
            logits = [t.cpu() if t is not None else None for t in logits]
            torch.save({"logits": logits, "moe": stats, "rank": rank}, Path(out_dir) / f"{name}.rank{rank}.pt")
            dist.barrier(group=groups.control)
    except BaseException:  # noqa: BLE001 - a spawned rank must exit non-zero on anything, or the parent hangs
        traceback.print_exc()
        os._exit(1)


def run_layouts(
    cases: list[tuple[str, str, dict]],
    out_dir: str,
    world: int = 2,
    timeout: float = 120.0,
    device_type: str = "cpu",
    backend: str = "gloo",
) -> dict:
    """Run every case on `world` spawned ranks; returns {case name: {rank: saved dict}}."""
    store = dist.TCPStore(
        "127.0.0.1", 0, world, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=60)
    )
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_rank_main, args=(r, world, store.port, cases, out_dir, device_type, backend), daemon=True)
        for r in range(world)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.is_alive():
            p.kill()
    assert codes == [0] * world, f"rank exit codes {codes}"
    return {name: {r: torch.load(Path(out_dir) / f"{name}.rank{r}.pt") for r in range(world)} for name, _, _ in cases}
