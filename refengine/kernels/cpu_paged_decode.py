"""Paged decode attention on CPU: one C++ loop that reads K/V in place through the block table.

Why: the PyTorch path (attention/reference.py) gathers every decode's context into a padded
[B, max_context] copy and reads it again in SDPA; on CPU that copy and its padding cost more than
the attention arithmetic (bench/RESULTS.md, "Engine performance (issue 16)"). Here each
(sequence, KV head) pair walks its own blocks once, the query heads that share the KV head (GQA)
are scored together against each key row as it is read, and the softmax is online (running max
and sum, as flash attention does), so nothing is copied, padded or read twice. A work item is a
whole sequence: each cache row holds all KV heads side by side, so one pass over the rows reads
them contiguously (a (sequence, head) split reads a quarter of every row and drags in the rest).

The cache is float32 or bfloat16; the arithmetic is float32 either way (a bfloat16 element is
widened exactly as it is loaded). Without it a bfloat16 decode went to the PyTorch path: its gather
and SDPA cost a bfloat16 `tiny` step 0.3-2.1 ms at 1-64 sequences (bench/RESULTS.md, "After the
bfloat16 decode kernel"). On a CPU with AVX-512 (or AVX2 and FMA) and a head size of up to 128 in steps of
16 (8) the context is walked in tiles of 16 (8) tokens, each tile's scores computed as one vector,
and the next tile's K and V rows are asked of memory while this one computes (cpu_paged_decode.cpp):
in the engine each layer's cache is cold when it is read (the other layers evicted it), and the
loads alone kept too few misses in flight.

Plain C++ (cpu_paged_decode.cpp beside this file) with no torch headers, compiled on first use and
cached, keyed by the CPU's instruction-set flags, called through ctypes (kernels/cpu_build.py). It splits the sequences into ranges of about equal context on std::threads started per call
(no second OpenMP runtime spins beside torch's), one per MIN_BYTES_PER_THREAD of context read, up
to torch.get_num_threads(): below that a second thread waits on torch's spinning workers longer
than it saves. It degrades cleanly: float32 and bfloat16 contiguous caches only; if the
build fails, `available()` is False and the PyTorch path runs. `REFENGINE_CPU_KERNELS=0` turns it
off. Tested against the PyTorch oracle in tests/refengine/kernels/test_cpu_paged_decode.py.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from refengine.kernels.cpu_build import CppLibrary, enabled_by_env

# The C++ beside this file (the algorithm and its two bodies are described at its top).
_SOURCE = "".join((Path(__file__).parent / name).read_text() for name in ("cpu_simd.h", "cpu_paged_decode.cpp"))
ENABLED = enabled_by_env()


def _declare(cdll: ctypes.CDLL) -> None:
    for f in (cdll.paged_decode, cdll.paged_decode_bf16):
        f.restype = None
        f.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 7 + [ctypes.c_float, ctypes.c_int64, ctypes.c_int64]


LIBRARY = CppLibrary("cpu_paged_decode", _SOURCE, _declare, "CPU paged decode kernel")


def available() -> bool:
    """Whether the kernel is on and built (building it on the first call); False where it cannot be."""
    return ENABLED and LIBRARY.available()


# Context bytes (K and V) each thread must read before a call splits over threads. The threads are
# started per call beside torch's OpenMP workers, which spin for milliseconds after each op on the
# cores those threads need; on a 2-core AMX Xeon a second thread cost a `tiny` float32 decode step
# of 2-4 sequences 3-4 ms and gained at most 2% at 64 (bench/cpu_decode_paths.py, docs/engine.md).
MIN_BYTES_PER_THREAD = 32 << 20
# The vector body (AVX-512 or AVX2) asks memory for the next tile's K and V rows while it computes this one (the
# engine's caches are cold at each layer: 2.1x faster for bfloat16 there, bench/decode_prefetch.py).
# Off only for that bench's other arm.
PREFETCH = True


def threads_for(kv_bytes: int) -> int:
    """How many threads a call reading `kv_bytes` of context uses: torch's count at most, one per
    MIN_BYTES_PER_THREAD, at least one."""
    return max(1, min(torch.get_num_threads(), kv_bytes // MIN_BYTES_PER_THREAD))


# The library's entry point for each cache dtype it reads.
_ENTRY = {torch.float32: "paged_decode", torch.bfloat16: "paged_decode_bf16"}


def applies(q: torch.Tensor, kv_cache: torch.Tensor) -> bool:
    return ENABLED and q.device.type == "cpu" and kv_cache.dtype in _ENTRY and kv_cache.is_contiguous() and available()


def paged_decode_cpu(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    num_heads: int,
    scale: float,
) -> torch.Tensor:
    """q [B, heads * head_dim] (one decode token per sequence) -> [B, heads * head_dim] float32.

    block_tables [B, max_blocks] and seq_lens [B] (context length including this token) as in
    AttentionMetadata; the cache is float32 or bfloat16 and contiguous (see `applies`)."""
    _, num_blocks, block_size, kv_heads, head_dim = kv_cache.shape
    b = q.shape[0]
    if num_heads % kv_heads:
        raise ValueError(f"{num_heads} query heads do not group over {kv_heads} KV heads")
    qv = q.reshape(b, num_heads * head_dim).to(torch.float32).contiguous()
    tables = block_tables.to(torch.int32).contiguous()
    lens = seq_lens.to(torch.int32).contiguous()
    if tables.shape[0] != b or lens.shape[0] != b:
        raise ValueError("block_tables and seq_lens need one row per decode")
    out = torch.empty_like(qv)
    # One thread unless torch has more: then the context's size decides (summing it costs a torch op).
    threads = (
        1
        if torch.get_num_threads() == 1
        else threads_for(int(lens.sum()) * kv_heads * head_dim * 2 * kv_cache.itemsize)
    )
    getattr(LIBRARY.load(), _ENTRY[kv_cache.dtype])(
        qv.data_ptr(),
        kv_cache.data_ptr(),
        tables.data_ptr(),
        lens.data_ptr(),
        out.data_ptr(),
        b,
        num_heads,
        head_dim,
        num_blocks,
        block_size,
        kv_heads,
        tables.shape[1],
        float(scale),
        threads,
        int(PREFETCH),
    )
    return out
