"""What every rank runs: its shard of the model, its KV cache, and (off the driver) the worker loop.

A rank builds only its part: the layers of its pipeline stage, narrowed to its TP shard by the
layers' weight loaders, and KV cache tensors for those layers and its KV heads. The number of
KV blocks is a scheduler quantity and must be the same on every rank, so every rank computes it
with `kv_blocks_for` from the same engine arguments (the budget is per rank, the layout of the
largest stage decides).

The worker loop waits on the control group for the driver's next message (control_channel.py):
("step", SchedulerOutput) runs the step, ("stats", None) answers with this rank's counters,
("shutdown", None) returns. A failed collective raises out of the loop and the process exits
non-zero; the driver sees its sockets close. Under the batch queue the messages of several steps
may be queued for a busy rank; it runs them in order.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from refengine.config import EngineArgs
from refengine.distributed.comm_timer import CommTimer
from refengine.distributed.control_channel import ControlChannel
from refengine.distributed.parallel_state import ProcessGroups
from refengine.distributed.pipeline_runner import PipelineStageRunner
from refengine.errors import RefEngineError
from refengine.model.layers.attention import allocate_kv_caches, kv_cache_bytes_per_block
from refengine.model.layers.moe import MoEParallel
from refengine.model.loader import load_model
from refengine.parallel.layout import ParallelConfig, PipelineStage
from refengine.quant.config import QuantConfig

log = logging.getLogger(__name__)

DEFAULT_KV_CACHE_BYTES_CPU = 1 << 30  # 1 GiB per rank: plenty for the tiny models, safe on a laptop


@dataclass
class WorkerSpec:
    """Everything a rank needs to build its part; picklable, handed to spawned ranks."""

    args: EngineArgs
    model_dir: str
    dtype: torch.dtype
    device_type: str  # "cpu" or "cuda"
    num_blocks: int
    quant: QuantConfig | None = None
    kv_cache_dtype: torch.dtype | None = None  # None: the model dtype


def stage_config(model_config, pc: ParallelConfig, pp_rank: int):
    """The ModelConfig as this stage sees it (its own layer count), for sizing KV caches."""
    start, end = pc.stage_layers(model_config.num_hidden_layers)[pp_rank]
    return dataclasses.replace(model_config, num_hidden_layers=end - start)


def kv_blocks_for(args, model_config, pc: ParallelConfig, dtype: torch.dtype) -> int:
    """KV blocks every rank allocates: the per-rank budget over the largest stage's bytes per block."""
    if args.num_gpu_blocks_override is not None:
        return args.num_gpu_blocks_override
    widest = max(range(pc.pipeline_parallel_size), key=lambda s: stage_config(model_config, pc, s).num_hidden_layers)
    per_block = kv_cache_bytes_per_block(
        stage_config(model_config, pc, widest), args.block_size, dtype, pc.tensor_parallel_size
    )
    budget = args.kv_cache_memory_bytes or DEFAULT_KV_CACHE_BYTES_CPU
    blocks = budget // per_block
    if blocks < 1:
        raise RefEngineError(
            f"kv_cache_memory_bytes={budget} is smaller than one KV block ({per_block} bytes); raise it"
        )
    return blocks


def rank_device(device_type: str) -> torch.device:
    if device_type != "cuda":
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", dist.get_rank() if dist.is_initialized() else 0))
    device = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def set_cpu_threads(local_world_size: int) -> int:
    """Ranks on one machine share its cores: each gets cpus // ranks intra-op threads (at least 1)."""
    n = max(1, (os.cpu_count() or 1) // max(1, local_world_size))
    torch.set_num_threads(n)
    return n


def build_runner(spec: WorkerSpec, model_config, pc: ParallelConfig, groups: ProcessGroups) -> PipelineStageRunner:
    info = groups.info
    start, end = pc.stage_layers(model_config.num_hidden_layers)[info.pp_rank]
    stage = PipelineStage(start, end, info.is_first_stage, info.is_last_stage)
    extra: dict[str, Any] = {"stage": stage}  # the model's parallel keywords (load_model's **parallel)
    if getattr(model_config, "num_experts", 0):
        extra["moe"] = MoEParallel(
            expert_parallel=pc.enable_expert_parallel, capacity_factor=pc.moe_capacity_factor, dispatch=pc.moe_dispatch
        )
    device = rank_device(spec.device_type)
    model = load_model(
        spec.model_dir,
        model_config,
        spec.dtype,
        device,
        tp_rank=info.tp_rank,
        tp_size=info.tp_size,
        quantization=spec.quant,
        **extra,
    )
    kv_caches = allocate_kv_caches(
        stage_config(model_config, pc, info.pp_rank),
        spec.num_blocks,
        spec.args.block_size,
        spec.kv_cache_dtype or spec.dtype,
        device,
        info.tp_size,
    )
    # One micro-batch per step when nothing overlaps (PP 1) or whole batches overlap (batch queue).
    micro_batches = pc.num_micro_batches if pc.uses_micro_batches else 1
    return PipelineStageRunner(
        model,
        kv_caches,
        spec.args.block_size,
        device,
        spec.args.seed,
        info,
        micro_batches,
        model_config.hidden_size,
        spec.dtype,
    )


def rank_stats(runner: PipelineStageRunner) -> dict:
    s = runner.stats
    out = {
        "rank": runner.info.rank,
        "pp_rank": runner.info.pp_rank,
        "tp_rank": runner.info.tp_rank,
        "steps": s.steps,
        "busy_s": s.busy_s,
        "wall_s": s.wall_s,
        **CommTimer.totals(),
    }
    moe = getattr(runner.model, "moe_stats", None)
    if moe is not None:
        out["moe"] = moe()
    return out


def worker_loop(runner: PipelineStageRunner, groups: ProcessGroups) -> None:
    channel = ControlChannel(groups.control, dist.get_world_size(), groups.info.rank)
    while True:
        kind, payload = channel.receive()
        if kind == "step":
            runner.execute_model(payload)
        elif kind == "stats":
            dist.gather_object(rank_stats(runner), None, dst=0, group=groups.control)
        elif kind == "comm_timer":
            CommTimer.enable(payload)
        elif kind == "shutdown":
            return
