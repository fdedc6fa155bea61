"""`llmdiag calibrate`: this machine's operator costs, measured with refengine's own layers.

- matmul: refengine's ColumnParallelLinear (its CPU path: oneDNN with a pre-packed weight) of an
  [M, s] input by an [s, s] weight, at a grid of M (tokens) and s, rotating through distinct
  weights so that each call reads its weight from memory, as in a model's step.
- attention: refengine's Attention layer (store into the paged cache, then its decode or prefill
  path) at a grid of batch x context (decode, at three layouts of GQA ratio and head dim, rotating
  through caches as a step's layers do) and prompt lengths (prefill), fitted to the KV elements read,
  the query elements and the scores over the kernel's threads (decode_attention.py), and to tokens x
  context x heads x head_dim (prefill);
  and prefill per head on a grid of
  prompt lengths x head dims (the table the step model reads: analyzers/plan/attention_table.py).
- elementwise: one layer's worth of refengine's RMSNorm (two, with the residual add), RoPE and
  SiluAndMul at a grid of tokens, fitted to tokens x hidden.
- step and layer overhead: the real LLMEngine decoding `tiny-test`'s shape (whose arithmetic is
  negligible) at two depths; what a layer and a step take beyond the model's predicted time is
  refengine's own cost per layer and per step, fitted to requests (engine_overheads.py).
- ranks that share the host: the matmul, attention and elementwise tables again at each thread
  count that R ranks get (cores // R, refengine's split) for the R asked for.
The collectives come from the comm probe (the face runs it and passes the rows in).
On a GPU (calibrate/device.py) the same layers run there in bfloat16, each point timed as the engine
queues its kernels (calibrate/timing.py); ranks do not share a GPU, so no fewer-thread tables.
Each point is the fastest of `repeats` timed calls after a warm-up call (others disturb the rest).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from analyzers.plan.calibrate.attention import measure_attention, measure_attention_table
from analyzers.plan.calibrate.device import CPU, MeasureDevice, resolve_measure_device
from analyzers.plan.calibrate.elementwise import measure_elementwise
from analyzers.plan.calibrate.engine_overheads import DEEP, OVERHEAD_MODEL, SHALLOW, measure_engine_overheads
from analyzers.plan.calibrate.grid import CalibrationGrid
from analyzers.plan.calibrate.matmul import measure_matmul, roofline_of
from analyzers.plan.profile import CollectiveCost, LinearCost, MachineProfile, ThreadTables

__all__ = ["CalibrationGrid", "MeasureDevice", "calibrate", "rank_threads", "resolve_measure_device"]


def collective_of(rows: list[dict]) -> CollectiveCost | None:
    """All-reduce rows of the comm probe (size_bytes, time_us, busbw_gbs) -> latency and bus bandwidth."""
    ar = sorted((r for r in rows if r["op"] == "all_reduce"), key=lambda r: r["size_bytes"])
    if len(ar) < 2:
        return None
    small, big = ar[0], ar[-1]
    return CollectiveCost(latency_s=small["time_us"] * 1e-6, bus_bw_bytes_s=max(big["busbw_gbs"], 1e-3) * 1e9)


def measure_at_threads(grid: CalibrationGrid, threads: int, progress: Callable[[str], None]) -> ThreadTables:
    """The matmul, attention and elementwise tables at `threads` intra-op threads (then restored)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        progress(f"matmul grid ({threads} threads)")
        table = measure_matmul(grid)
        progress(f"attention ({threads} threads)")
        decode, prefill, _ = measure_attention(grid)
        prefill_table = measure_attention_table(grid)
        progress(f"elementwise ({threads} threads)")
        elementwise, _ = measure_elementwise(grid)
    finally:
        torch.set_num_threads(before)
    return ThreadTables(threads, table, decode, prefill, elementwise, prefill_table)


def rank_threads(cores: int, threads: int, rank_counts: tuple[int, ...]) -> list[int]:
    """The thread counts below `threads` that R ranks sharing `cores` cores compute with, for each R."""
    return sorted({max(1, cores // r) for r in rank_counts if r > 1} - {threads}, reverse=True)


def calibrate(
    grid: CalibrationGrid,
    comm_rows: list[dict] | None = None,
    name: str = "this machine",
    progress: Callable[[str], None] = lambda _: None,
    rank_counts: tuple[int, ...] = (2, 4),
    device: MeasureDevice = CPU,
    no_comm_reason: str = "--no-comm",
) -> MachineProfile:
    """Every measurement above, into a measured profile; `rank_counts`: the ranks (TP x PP) that will
    share this host's cores in the plans to predict, each measured again at its ranks' thread count
    (on a CPU; on a GPU each rank has a device of its own)."""
    import datetime
    import os
    import platform

    import torch

    from analyzers.model.presets import resolve_model
    from analyzers.plan.step_model import StepModel, StepShape

    cores, threads = os.cpu_count() or 1, torch.get_num_threads()
    progress(f"matmul grid ({device.description})")
    table = measure_matmul(grid, device)
    progress("attention")
    decode, prefill, att_points = measure_attention(grid, device)
    prefill_table = measure_attention_table(grid, device)
    progress("elementwise")
    elementwise, el_points = measure_elementwise(grid, device)
    fewer = (
        []
        if device.is_gpu
        else [measure_at_threads(grid, t, progress) for t in rank_threads(cores, threads, rank_counts) if t < threads]
    )
    collective = collective_of(comm_rows or []) or CollectiveCost(latency_s=0.0, bus_bw_bytes_s=1e12)
    provisional = MachineProfile(
        name=name,
        source="measured",
        dtype_bytes=device.dtype_bytes,
        roofline=roofline_of(table, device.dtype_bytes),
        step_overhead=LinearCost(0.0, 0.0),
        collective=collective,
        matmul=table,
        attention_decode=decode,
        attention_prefill=prefill,
        elementwise=elementwise,
    )

    def price(model_dir: str, batch: int, context: int, layer: LinearCost | None) -> float:
        profile = dataclasses.replace(provisional, layer_overhead=layer)
        return StepModel(resolve_model(model_dir), profile).step_cost(StepShape(((1, context),) * batch, batch)).total_s

    progress("engine step and layer overhead")
    overheads = measure_engine_overheads(grid.overhead_batches, price, device.kind)
    where = (
        f"measured on {platform.node()}'s {device.description} (torch {torch.__version__}, queued calls timed "
        "per synchronize)"
        if device.is_gpu
        else f"measured on {platform.node()} ({platform.machine()}, torch {torch.__version__}, {threads} threads), float32"
    )
    shared = (
        "ranks: one GPU each (nothing shared)"
        if device.is_gpu
        else f"ranks sharing its {cores} cores: operators measured again at "
        + (
            ", ".join(str(t.threads) for t in fewer) + (" thread" if [t.threads for t in fewer] == [1] else " threads")
            if fewer
            else "no other thread count"
        )
    )
    assumptions = [
        where,
        shared,
        "decode attention measured at (heads, KV heads, head dim) "
        + ", ".join(f"({h}, {kv}, {d})" for h, kv, d in grid.decode_layouts)
        + ", rotating through caches as a step's layers do; prefill attention at "
        f"{grid.heads} heads, {grid.kv_heads} KV heads; other shapes scale by the elements read and the work",
        "elementwise measured at hidden 1024 (intermediate 2.75 x hidden); other sizes scale by tokens x hidden",
        f"step and layer overhead: the engine's decode steps on {OVERHEAD_MODEL}'s shape at {SHALLOW} and "
        f"{DEEP} layers beyond their predicted model time",
        "collectives: "
        + (
            f"the comm probe's all-reduce ({'nccl' if device.is_gpu else 'gloo'})"
            if comm_rows
            else f"not measured ({no_comm_reason}): free, which is wrong under TP/PP > 1"
        ),
    ]
    return MachineProfile(
        name=name,
        source="measured",
        dtype_bytes=device.dtype_bytes,
        roofline=provisional.roofline,
        step_overhead=overheads.step,
        layer_overhead=overheads.layer,
        collective=collective,
        matmul=table,
        attention_decode=decode,
        attention_prefill=prefill,
        attention_prefill_table=prefill_table,
        elementwise=elementwise,
        assumptions=assumptions,
        host=platform.node(),
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        measured_points={"attention": att_points, "elementwise": el_points, **overheads.points},
        threads=0 if device.is_gpu else threads,  # 0, 0: not a CPU's threads; each rank a device of its own
        cores=0 if device.is_gpu else cores,
        fewer_threads=fewer,
    )
