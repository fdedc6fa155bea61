"""Paged prefill attention on CPU: prompts' causal attention in one C++ call, tiles of query rows
against tiles of keys (the algorithm is at the top of cpu_paged_prefill.cpp beside this file).

Why: PyTorch's CPU SDPA (`_scaled_dot_product_flash_attention_for_cpu`) took 3.3-3.4 ms a layer for a
256-token prompt of `tiny` (16 query heads, 4 KV heads, head size 64) on one AVX-512 core, and
refengine's time to first token trailed vLLM's at 256-token prompts. This kernel takes 1.4 ms there in
float32 and 1.1 ms in bfloat16 (bfloat16 products where the CPU has AVX-512 BF16), 1.5-2.4x faster
than SDPA in float32 and 2.0-3.8x in bfloat16 from 64 to 2,048 tokens, and the bfloat16 prefill step
1.14-1.33x (bench/cpu_prefill_attention.py, bench/RESULTS.md). It reads the paged cache in place
through the block table, so the per-prefill gather of the context (and the shifted-causal mask a
chunk after a prefix needs) is gone too.

Plain C++ with no torch headers, compiled on first use and cached, keyed by the CPU's flags
(kernels/cpu_build.py), called through ctypes, threads split the (prefill, KV head) pairs by their
work, up to torch.get_num_threads() (one per MIN_WORK_PER_THREAD). AVX-512 (16-lane tiles) or AVX2
with FMA (8), a head size of up to 128 in steps of the lanes and at most as many query heads per KV
head as lanes only (`applies`); elsewhere, or if the build fails, PyTorch's SDPA runs.
`REFENGINE_CPU_KERNELS=0` turns it off. Tested against the PyTorch oracle in
tests/refengine/kernels/test_cpu_paged_prefill.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
from collections.abc import Iterator
from pathlib import Path

import torch

from refengine.kernels.cpu_build import CppLibrary, enabled_by_env

_SOURCE = "".join((Path(__file__).parent / name).read_text() for name in ("cpu_simd.h", "cpu_paged_prefill.cpp"))
ENABLED = enabled_by_env()


def _declare(cdll: ctypes.CDLL) -> None:
    for f in (cdll.paged_prefill, cdll.paged_prefill_bf16):
        f.restype = None
        f.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 7 + [ctypes.c_float, ctypes.c_int64]
    cdll.prefill_supported.restype = ctypes.c_int64
    cdll.prefill_supported.argtypes = [ctypes.c_int64, ctypes.c_int64]


LIBRARY = CppLibrary("cpu_paged_prefill", _SOURCE, _declare, "CPU paged prefill kernel")

# Work (query-key pairs, rows x context summed over the prefills, times query heads x head size: the
# multiply-adds of the scores) each thread must have before a call splits over threads: threads are
# started per call beside torch's OpenMP workers, which spin on the cores they need (the decode
# kernel's finding, kernels/cpu_paged_decode.py). A rule in pairs alone, set on `tiny` (16 heads of
# 64: one 512-token prompt is 2^18 pairs, 2^28 of work, about 6 ms a layer on one core), split
# tiny-test's 512-token prompt too (4 heads of 16: 2^24, 0.2 ms a layer), whose kernel then ran 39%
# slower inside the engine than whole (bench/prefill_threads.py, both arms by shape and length).
MIN_WORK_PER_THREAD = 1 << 27


_held_threads: int | None = None  # set by held_threads(): every call uses this many, whatever its work


def threads_for(work: int) -> int:
    """How many threads a call of `work` (query-key pairs x query heads x head size) uses: torch's count
    at most, one per MIN_WORK_PER_THREAD, at least one."""
    wanted = work // MIN_WORK_PER_THREAD if _held_threads is None else _held_threads
    return max(1, min(torch.get_num_threads(), wanted))


@contextlib.contextmanager
def held_threads(threads: int) -> Iterator[None]:
    """Calls inside use `threads` threads (torch's count at most) whatever their work: a calibration
    times a shape both whole and split, and prices each call by the rule above (llmdiag calibrate)."""
    global _held_threads
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    before, _held_threads = _held_threads, threads
    try:
        yield
    finally:
        _held_threads = before


def prefill_work(rows: torch.Tensor, num_heads: int, head_dim: int) -> int:
    """The scores' multiply-adds of a call: query rows x context (each prefill's rows over its
    context, itself included), summed, times query heads x head size. `rows` as paged_prefill_cpu's."""
    return int((rows[:, 1] * (rows[:, 1] + rows[:, 2])).sum()) * num_heads * head_dim


# The library's entry point for each cache dtype it reads.
_ENTRY = {torch.float32: "paged_prefill", torch.bfloat16: "paged_prefill_bf16"}


def applies(q: torch.Tensor, kv_cache: torch.Tensor, num_heads: int) -> bool:
    """Whether the kernel takes this step's prefills: on, built, a CPU, a float32 or bfloat16 contiguous
    cache, and a head shape its vector body has (building it on the first call)."""
    if not (ENABLED and q.device.type == "cpu" and kv_cache.dtype in _ENTRY and kv_cache.is_contiguous()):
        return False
    kv_heads, head_dim = kv_cache.shape[3], kv_cache.shape[4]
    if num_heads % kv_heads or not LIBRARY.available():
        return False
    return _takes(head_dim, num_heads // kv_heads)


@functools.lru_cache(maxsize=None)
def _takes(head_dim: int, group: int) -> bool:
    """The build's answer for a head shape, asked once (applies() runs for every layer of every step)."""
    return bool(LIBRARY.load().prefill_supported(head_dim, group))


def paged_prefill_cpu(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    rows: torch.Tensor,
    num_heads: int,
    scale: float,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """q [T, heads * head_dim] (the step's tokens) -> [T, heads * head_dim] float32 with the prefills'
    rows written (a given `out` keeps its other rows: the decodes').

    block_tables [P, max_blocks] int32, one row per prefill; rows [P, 3] (first token in q, query rows,
    position of the first row): AttentionMetadata's prefill_block_tables and prefill_rows. The caller
    checked `applies`."""
    _, num_blocks, block_size, kv_heads, head_dim = kv_cache.shape
    t = q.shape[0]
    qv = q.reshape(t, num_heads * head_dim).to(torch.float32).contiguous()
    tables = block_tables.to(torch.int32).contiguous()
    spans = rows.to(torch.int64).contiguous()
    if tables.shape[0] != spans.shape[0] or spans.shape[1:] != (3,):
        raise ValueError("block_tables and rows need one row per prefill, rows three columns")
    if out is None:
        out = torch.zeros_like(qv)
    elif out.dtype != torch.float32 or not out.is_contiguous() or out.shape != qv.shape:
        raise ValueError(f"out must be a contiguous float32 [{t}, {num_heads * head_dim}]")
    getattr(LIBRARY.load(), _ENTRY[kv_cache.dtype])(
        qv.data_ptr(),
        kv_cache.data_ptr(),
        tables.data_ptr(),
        spans.data_ptr(),
        out.data_ptr(),
        spans.shape[0],
        num_heads,
        head_dim,
        num_blocks,
        block_size,
        kv_heads,
        tables.shape[1],
        float(scale),
        # One thread unless torch has more: then the work decides (summing it costs torch ops).
        1 if torch.get_num_threads() == 1 else threads_for(prefill_work(spans, num_heads, head_dim)),
    )
    return out
