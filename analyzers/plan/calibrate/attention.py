"""Attention timings: refengine's Attention layer at decode and prefill shapes (docs/planning.md)."""

from __future__ import annotations

import contextlib
import dataclasses

from analyzers.plan.attention_table import AttentionTable
from analyzers.plan.calibrate.device import CPU, MeasureDevice
from analyzers.plan.calibrate.grid import CalibrationGrid
from analyzers.plan.calibrate.timing import WEIGHTS_WORKING_SET, timed
from analyzers.plan.decode_attention import DecodeAttentionCost, DecodeCall
from analyzers.plan.profile import LinearCost


def _attention(
    grid: CalibrationGrid, seqs: list[tuple[int, int]], copies: int = 1, device: MeasureDevice = CPU
) -> float:
    """One call of refengine's Attention layer on sequences of (start_pos, new tokens); with `copies`,
    the calls rotate through that many caches (each its own blocks of one pool), so a call reads a
    context the last calls did not."""
    import itertools

    import torch

    from refengine.attention.metadata import build_attention_metadata
    from refengine.model.layers.attention import Attention

    bs = 16
    blocks, tables = 0, []
    for start, n in seqs:
        need = -(-(start + n) // bs)
        tables.append(list(range(blocks, blocks + need)))
        blocks += need
    on = dict(dtype=device.dtype, device=device.kind)
    cache = torch.randn(2, blocks * copies, bs, grid.kv_heads, grid.head_dim, **on)
    metas = [
        build_attention_metadata(
            [(s, n, [b + c * blocks for b in t]) for (s, n), t in zip(seqs, tables)], bs, device=device.kind
        )
        for c in range(copies)
    ]
    layer = Attention(grid.heads, grid.head_dim, grid.head_dim**-0.5, grid.kv_heads)
    t = sum(n for _, n in seqs)
    q = torch.randn(t, grid.heads * grid.head_dim, **on)
    k, v = torch.randn(t, grid.kv_heads * grid.head_dim, **on), torch.randn(t, grid.kv_heads * grid.head_dim, **on)
    rotation = itertools.cycle(metas)
    with torch.inference_mode():
        return timed(lambda: layer(q, k, v, cache, next(rotation)), grid.repeats, sync=device.sync())


def decode_split_bytes(device: MeasureDevice = CPU) -> int:
    """The context bytes per thread at which refengine's CPU decode kernel splits a call (0 where the
    kernel does not run: a GPU, no compiler, or turned off)."""
    from refengine.kernels import cpu_paged_decode

    return cpu_paged_decode.MIN_BYTES_PER_THREAD if not device.is_gpu and cpu_paged_decode.available() else 0


MAX_CACHES = 1024  # caches a decode point rotates through: WEIGHTS_WORKING_SET of them, at most this many


def caches_for(kv_elements: float, element_bytes: int = 4) -> int:
    """How many distinct caches of `kv_elements` a decode call rotates through."""
    return max(2, min(MAX_CACHES, -(-WEIGHTS_WORKING_SET // int(kv_elements * element_bytes))))


def measure_decode_attention(
    grid: CalibrationGrid, device: MeasureDevice = CPU
) -> tuple[DecodeAttentionCost, list[DecodeCall]]:
    """Decode calls at each layout x batch x context, rotating through distinct caches (up to 256 MiB
    of them), as an engine step's layers each read their own: a call timed over and over on one cache
    reads it from the CPU's caches, up to twice as fast as a step does (docs/planning.md)."""
    import torch

    # A GPU's calls do not split by the host's threads: one "thread" each, so the fit's rule is off.
    threads, split = (1 if device.is_gpu else torch.get_num_threads()), decode_split_bytes(device)
    rule = DecodeAttentionCost(0.0, 0.0, split_bytes=split)  # the kernel's thread rule, for the fit
    calls = []
    for heads, kv_heads, head_dim in grid.decode_layouts:
        layout = dataclasses.replace(grid, heads=heads, kv_heads=kv_heads, head_dim=head_dim)
        for b in grid.decode_batches:
            for ctx in grid.decode_contexts:
                kv = 2.0 * b * ctx * kv_heads * head_dim
                seconds = _attention(layout, [(ctx - 1, 1)] * b, caches_for(kv, device.dtype_bytes), device)
                scores = float(b) * ctx * heads
                calls.append(DecodeCall(kv, scores * head_dim, scores, rule.threads_for(kv, threads), seconds))
    return DecodeAttentionCost.fit(calls, split, device.dtype_bytes), calls


def measure_attention(
    grid: CalibrationGrid, device: MeasureDevice = CPU
) -> tuple[DecodeAttentionCost, LinearCost, dict]:
    decode, calls = measure_decode_attention(grid, device)
    px, py = [], []
    for n in grid.prefill_tokens:
        px.append(float(n) * n * grid.heads * grid.head_dim)
        py.append(_attention(grid, [(0, n)], device=device))
    points = {"decode": [dataclasses.astuple(c) for c in calls], "prefill": list(zip(px, py))}
    return decode, LinearCost.fit(px, py), points


def measure_attention_table(grid: CalibrationGrid, device: MeasureDevice = CPU) -> AttentionTable:
    """Prefill attention per head: one sequence of n tokens at each head dim, 4 heads and 2 KV heads.
    On a CPU with threads to split over, each point twice: the kernel's call whole and split, with
    the engine's rule for which a call gets (analyzers/plan/attention_table.py)."""
    import torch

    split = _split_rule(device)

    def table(threads: int | None) -> list[list[float]]:
        from refengine.kernels import cpu_paged_prefill

        times = [[0.0] * len(grid.table_head_dims) for _ in grid.table_tokens]
        for j, d in enumerate(grid.table_head_dims):
            layout = dataclasses.replace(grid, heads=4, kv_heads=2, head_dim=d)
            for i, n in enumerate(grid.table_tokens):
                with cpu_paged_prefill.held_threads(threads) if threads else contextlib.nullcontext():
                    times[i][j] = max(_attention(layout, [(0, n)], device=device), 1e-7) / 4
        return times

    if split is None:
        return AttentionTable(list(grid.table_tokens), list(grid.table_head_dims), table(None))
    threads = torch.get_num_threads()
    return AttentionTable(list(grid.table_tokens), list(grid.table_head_dims), table(1), table(threads), threads, split)


def _split_rule(device: MeasureDevice) -> float | None:
    """refengine's CPU prefill kernel's work per thread before a call splits, where it runs here with
    more than one thread to split over; None where a call is never split (a GPU, one thread, no kernel)."""
    import torch

    from refengine.kernels import cpu_paged_prefill

    if device.is_gpu or torch.get_num_threads() < 2 or not cpu_paged_prefill.LIBRARY.available():
        return None
    return float(cpu_paged_prefill.MIN_WORK_PER_THREAD)
