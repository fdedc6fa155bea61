"""`llmdiag calibrate`: this machine's operator costs, measured with refengine's own layers.

- matmul: refengine's ColumnParallelLinear (its CPU path: oneDNN with a pre-packed weight) of an
  [M, s] input by an [s, s] weight, at a grid of M (tokens) and s, rotating through distinct
  weights so that each call reads its weight from memory, as in a model's step.
- attention: refengine's Attention layer (store into the paged cache, then its decode or prefill
  path) at a grid of batch x context (decode) and prompt lengths (prefill), fitted linearly to the
  KV elements read and to tokens x context x heads x head_dim; and prefill per head on a grid of
  prompt lengths x head dims (the table the step model reads: analyzers/plan/attention_table.py).
- elementwise: one layer's worth of refengine's RMSNorm (two, with the residual add), RoPE and
  SiluAndMul at a grid of tokens, fitted to tokens x hidden.
- step and layer overhead: the real LLMEngine decoding `tiny-test`'s shape (whose arithmetic is
  negligible) at two depths; what a layer and a step take beyond the model's predicted time is
  refengine's own cost per layer and per step, fitted to requests (engine_overheads.py).
- ranks that share the host: the matmul, attention and elementwise tables again at each thread
  count that R ranks get (cores // R, refengine's split) for the R asked for.
The collectives come from the comm probe (the face runs it and passes the rows in).
Each point is the fastest of `repeats` timed calls after a warm-up call (others disturb the rest).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from analyzers.diagnosis_error import DiagnosisError
from analyzers.plan.attention_table import AttentionTable
from analyzers.plan.engine_overheads import DEEP, OVERHEAD_MODEL, SHALLOW, measure_engine_overheads
from analyzers.plan.profile import CollectiveCost, LinearCost, MachineProfile, MatmulTable, Roofline, ThreadTables


@dataclass(frozen=True)
class CalibrationGrid:
    # 2, 4 and 8 rows: where a decode batch's linears change kernel (refengine/model/layers/cpu_gemm.py
    # sends a few float32 rows to F.linear, more to the packed path), which interpolation cannot see.
    ms: tuple[int, ...] = (1, 2, 4, 8, 16, 64, 256, 1024, 2048)
    sizes: tuple[int, ...] = (64, 256, 1024, 4096)
    decode_batches: tuple[int, ...] = (1, 8, 32)
    decode_contexts: tuple[int, ...] = (64, 512, 2048)
    prefill_tokens: tuple[int, ...] = (32, 256, 1024)
    table_tokens: tuple[int, ...] = (32, 128, 512, 2048)  # the prefill attention table's sequences
    table_head_dims: tuple[int, ...] = (16, 64, 128)  # ... and head dims (4 heads, 2 KV heads)
    elementwise_tokens: tuple[int, ...] = (1, 32, 256, 1024)
    overhead_batches: tuple[int, ...] = (1, 8, 32)
    repeats: int = 5
    heads: int = 16
    kv_heads: int = 4
    head_dim: int = 64

    def __post_init__(self) -> None:
        for name in (
            "ms",
            "sizes",
            "decode_batches",
            "decode_contexts",
            "prefill_tokens",
            "elementwise_tokens",
            "overhead_batches",
            "table_tokens",
            "table_head_dims",
        ):
            values = getattr(self, name)
            if len(values) < 2 or list(values) != sorted(set(values)) or values[0] < 1:
                raise DiagnosisError(f"calibration grid {name} needs at least two increasing values >= 1")
        if self.repeats < 1:
            raise DiagnosisError("repeats must be >= 1")


def timed(fn: Callable[[], object], repeats: int, min_total_s: float = 0.05, max_calls: int = 50) -> float:
    """The fastest call (others on a shared machine only ever add time), of at least `repeats` calls and
    enough of them to fill `min_total_s`, at most `max_calls`."""
    fn()
    out: list[float] = []
    while len(out) < repeats or (sum(out) < min_total_s and len(out) < max_calls):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


WEIGHTS_WORKING_SET = 256 << 20  # bytes of distinct weights a size's matmuls rotate through
MAX_WEIGHTS = 64


def measure_matmul(grid: CalibrationGrid) -> MatmulTable:
    """Each size rotates through distinct weights (up to 256 MiB of them), as a model's step touches
    each linear's weight once: one weight timed over and over would sit in cache and measure a
    decode step's weight reads at cache speed, not memory's."""
    import itertools

    import torch

    from refengine.model.layers.linear import ColumnParallelLinear

    times = [[0.0] * len(grid.sizes) for _ in grid.ms]
    with torch.inference_mode():
        for j, s in enumerate(grid.sizes):
            layers = [
                ColumnParallelLinear(s, s, params_dtype=torch.float32)
                for _ in range(max(1, min(MAX_WEIGHTS, WEIGHTS_WORKING_SET // (s * s * 4))))
            ]
            for layer in layers:  # real values: uninitialized memory may hold slow denormals
                weight = layer.weight  # registered by the layer's quant method: nn.Module's getattr
                assert isinstance(weight, torch.Tensor)
                weight.normal_(0, 0.02)
            for i, m in enumerate(grid.ms):
                x = torch.randn(m, s)
                for layer in layers:  # the first call packs the weight (refengine's CPU linear)
                    layer(x)
                rotation = itertools.cycle(layers)

                def call(x: torch.Tensor = x, rotation: Iterator[ColumnParallelLinear] = rotation) -> object:
                    return next(rotation)(x)

                times[i][j] = max(timed(call, grid.repeats), 1e-7)
            del layers
    return MatmulTable(list(grid.ms), list(grid.sizes), monotone(times))


def monotone(times: list[list[float]]) -> list[list[float]]:
    """A larger matmul never costs less: a smaller shape that measured slower than a larger one was
    disturbed, so it is lowered to the larger one's time (scanning from the largest shape down)."""
    out = [row[:] for row in times]
    for i in reversed(range(len(out))):
        for j in reversed(range(len(out[0]))):
            up = out[i + 1][j] if i + 1 < len(out) else float("inf")
            right = out[i][j + 1] if j + 1 < len(out[0]) else float("inf")
            out[i][j] = min(out[i][j], up, right)
    return out


def _attention(grid: CalibrationGrid, seqs: list[tuple[int, int]]) -> float:
    """One call of refengine's Attention layer on sequences of (start_pos, new tokens)."""
    import torch

    from refengine.attention.metadata import build_attention_metadata
    from refengine.model.layers.attention import Attention

    bs = 16
    blocks, tables = 0, []
    for start, n in seqs:
        need = -(-(start + n) // bs)
        tables.append(list(range(blocks, blocks + need)))
        blocks += need
    cache = torch.zeros(2, blocks, bs, grid.kv_heads, grid.head_dim)
    meta = build_attention_metadata([(s, n, t) for (s, n), t in zip(seqs, tables)], bs)
    layer = Attention(grid.heads, grid.head_dim, grid.head_dim**-0.5, grid.kv_heads)
    t = sum(n for _, n in seqs)
    q = torch.randn(t, grid.heads * grid.head_dim)
    k, v = torch.randn(t, grid.kv_heads * grid.head_dim), torch.randn(t, grid.kv_heads * grid.head_dim)
    with torch.inference_mode():
        return timed(lambda: layer(q, k, v, cache, meta), grid.repeats)


def measure_attention(grid: CalibrationGrid) -> tuple[LinearCost, LinearCost, dict]:
    dx, dy, px, py = [], [], [], []
    for b in grid.decode_batches:
        for ctx in grid.decode_contexts:
            dx.append(2.0 * b * ctx * grid.kv_heads * grid.head_dim)
            dy.append(_attention(grid, [(ctx - 1, 1)] * b))
    for n in grid.prefill_tokens:
        px.append(float(n) * n * grid.heads * grid.head_dim)
        py.append(_attention(grid, [(0, n)]))
    return LinearCost.fit(dx, dy), LinearCost.fit(px, py), {"decode": list(zip(dx, dy)), "prefill": list(zip(px, py))}


def measure_attention_table(grid: CalibrationGrid) -> AttentionTable:
    """Prefill attention per head: one sequence of n tokens at each head dim, 4 heads and 2 KV heads."""
    import dataclasses

    times = [[0.0] * len(grid.table_head_dims) for _ in grid.table_tokens]
    for j, d in enumerate(grid.table_head_dims):
        layout = dataclasses.replace(grid, heads=4, kv_heads=2, head_dim=d)
        for i, n in enumerate(grid.table_tokens):
            times[i][j] = max(_attention(layout, [(0, n)]), 1e-7) / 4
    return AttentionTable(list(grid.table_tokens), list(grid.table_head_dims), times)


def measure_elementwise(grid: CalibrationGrid, hidden: int = 1024) -> tuple[LinearCost, list]:
    import torch

    from refengine.model.layers.activation import SiluAndMul
    from refengine.model.layers.norm import RMSNorm
    from refengine.model.layers.rotary import RotaryEmbedding

    norm, act = RMSNorm(hidden), SiluAndMul()
    rope = RotaryEmbedding(grid.head_dim, 4096, 10000.0)
    inter = int(hidden * 2.75)
    xs, ys = [], []
    for t in grid.elementwise_tokens:
        h, r = torch.randn(t, hidden), torch.randn(t, hidden)
        q, k = torch.randn(t, grid.heads * grid.head_dim), torch.randn(t, grid.kv_heads * grid.head_dim)
        g, pos = torch.randn(t, 2 * inter), torch.arange(t) % 4096

        def layer(h=h, r=r, q=q, k=k, g=g, pos=pos) -> None:
            a, b = norm(h, r)
            rope(pos, q, k)
            norm(a, b)
            act(g)

        with torch.inference_mode():
            xs.append(float(t) * hidden)
            ys.append(timed(layer, grid.repeats))
    return LinearCost.fit(xs, ys), list(zip(xs, ys))


def roofline_of(table: MatmulTable, dtype_bytes: int = 4) -> Roofline:
    """The measured table's best FLOP rate and its small-M time as the roofline's peak and launch cost."""
    best = max(2.0 * m * s * s / table.times[i][j] for i, m in enumerate(table.ms) for j, s in enumerate(table.sizes))
    j = len(table.sizes) - 1
    s = table.sizes[j]
    bw = s * s * dtype_bytes / table.times[0][j]  # one row through the biggest weight: memory bound
    return Roofline(
        peak_flops=best,
        mem_bw_bytes_s=bw,
        compute_efficiency=1.0,
        memory_efficiency=1.0,
        launch_s=min(min(row) for row in table.times),
    )


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
) -> MachineProfile:
    """Every measurement above, into a measured profile; `rank_counts`: the ranks (TP x PP) that will
    share this host's cores in the plans to predict, each measured again at its ranks' thread count."""
    import datetime
    import os
    import platform

    import torch

    from analyzers.model.presets import resolve_model
    from analyzers.plan.step_model import StepModel, StepShape

    cores, threads = os.cpu_count() or 1, torch.get_num_threads()
    progress("matmul grid")
    table = measure_matmul(grid)
    progress("attention")
    decode, prefill, att_points = measure_attention(grid)
    prefill_table = measure_attention_table(grid)
    progress("elementwise")
    elementwise, el_points = measure_elementwise(grid)
    fewer = [measure_at_threads(grid, t, progress) for t in rank_threads(cores, threads, rank_counts) if t < threads]
    collective = collective_of(comm_rows or []) or CollectiveCost(latency_s=0.0, bus_bw_bytes_s=1e12)
    provisional = MachineProfile(
        name=name,
        source="measured",
        dtype_bytes=4,
        roofline=roofline_of(table),
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
    overheads = measure_engine_overheads(grid.overhead_batches, price)
    assumptions = [
        f"measured on {platform.node()} ({platform.machine()}, torch {torch.__version__}, {threads} threads), float32",
        f"ranks sharing its {cores} cores: operators measured again at "
        + (
            ", ".join(str(t.threads) for t in fewer) + (" thread" if [t.threads for t in fewer] == [1] else " threads")
            if fewer
            else "no other thread count"
        ),
        f"attention measured at {grid.heads} heads, {grid.kv_heads} KV heads, head dim {grid.head_dim}; "
        "other shapes scale by the elements read and the work",
        "elementwise measured at hidden 1024 (intermediate 2.75 x hidden); other sizes scale by tokens x hidden",
        f"step and layer overhead: the engine's decode steps on {OVERHEAD_MODEL}'s shape at {SHALLOW} and "
        f"{DEEP} layers beyond their predicted model time",
        "collectives: "
        + (
            "the comm probe's all-reduce (gloo)"
            if comm_rows
            else "not measured (--no-comm): free, which is wrong under TP/PP > 1"
        ),
    ]
    return MachineProfile(
        name=name,
        source="measured",
        dtype_bytes=4,
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
        threads=threads,
        cores=cores,
        fewer_threads=fewer,
    )
