"""Paged decode attention on CPU: one C++ loop that reads K/V in place through the block table.

Why: the PyTorch path (attention/reference.py) gathers every decode's context into a padded
[B, max_context] copy and reads it again in SDPA; on CPU that copy and its padding cost more than
the attention arithmetic (bench/RESULTS.md, "Engine performance (issue 16)"). Here each
(sequence, KV head) pair walks its own blocks once, the query heads that share the KV head (GQA)
are scored together against each key row as it is read, and the softmax is online (running max
and sum, as flash attention does), so nothing is copied, padded or read twice. A work item is a
whole sequence: each cache row holds all KV heads side by side, so one pass over the rows reads
them contiguously (a (sequence, head) split reads a quarter of every row and drags in the rest).

Plain C++ with no torch headers, compiled on first use with g++ in a few seconds and cached under
$LLMBENCH_CACHE/kernels (default ~/.cache/llmbench/kernels), called through ctypes (which
releases the GIL). It is built with -march=native, so the cache is keyed by the CPU's
instruction-set flags as well as the source, compiler flags and machine: a home directory shared
with a CPU that lacks AVX-512 must not load an object that uses it (that dies with SIGILL, which
no fallback catches). What each object was built for is written beside it (the .txt of the same
name). It splits the sequences into ranges of about equal context on std::threads started per call
(no second OpenMP runtime spins beside torch's), one per MIN_BYTES_PER_THREAD of context read, up
to torch.get_num_threads(): below that a second thread waits on torch's spinning workers longer
than it saves. It degrades cleanly: float32 contiguous caches only; if the
build fails, `available()` is False and the PyTorch path runs. `REFENGINE_CPU_KERNELS=0` turns it
off. Tested against the PyTorch oracle in tests/refengine/kernels/test_cpu_paged_decode.py.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

log = logging.getLogger(__name__)

_SOURCE = r"""
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

namespace {
struct Args {
  const float *qp, *kbase, *vbase; const int32_t *bt, *lens; float* op;
  int64_t H, D, BS, G, MAXNB, tok_stride, blk_stride; float sc;
};

void run_range(const Args& A, int64_t begin, int64_t end) {
  const float *qp = A.qp, *kbase = A.kbase, *vbase = A.vbase; const int32_t *bt = A.bt, *lens = A.lens;
  float* op = A.op; const int64_t H = A.H, D = A.D, BS = A.BS, G = A.G, MAXNB = A.MAXNB;
  const int64_t tok_stride = A.tok_stride, blk_stride = A.blk_stride; const float sc = A.sc;
// One work item per sequence, all its heads together: a key row holds every KV head's vector
// (KVH x D contiguous floats), so walking rows with the heads inside reads each row once, in order.
  std::vector<float> acc(H * D), s(H * BS), m(H), l(H);
  for (int64_t b = begin; b < end; ++b) {
    const int64_t len = lens[b];
    const float* qb = qp + b * H * D;
    std::fill(acc.begin(), acc.end(), 0.f);
    std::fill(m.begin(), m.end(), -INFINITY);
    std::fill(l.begin(), l.end(), 0.f);
    for (int64_t j = 0; j * BS < len; ++j) {
      const int64_t blk = bt[b * MAXNB + j], n = std::min(BS, len - j * BS);
      const float* kb = kbase + blk * blk_stride;
      const float* vb = vbase + blk * blk_stride;
      for (int64_t t = 0; t < n; ++t) {          // scores of every query head against key row t
        const float* kr = kb + t * tok_stride;
        for (int64_t hq = 0; hq < H; ++hq) {     // query head hq reads KV head hq / G
          const float* qh = qb + hq * D;
          const float* kh = kr + (hq / G) * D;
          float dot = 0.f;
#pragma omp simd reduction(+:dot)
          for (int64_t d = 0; d < D; ++d) dot += qh[d] * kh[d];
          s[hq * BS + t] = dot * sc;
        }
      }
      for (int64_t hq = 0; hq < H; ++hq) {       // online softmax: rescale what came before
        float* sh = s.data() + hq * BS;
        float mx = m[hq];
        for (int64_t t = 0; t < n; ++t) mx = std::max(mx, sh[t]);
        const float corr = std::exp(m[hq] - mx);
        l[hq] *= corr;
        float sum = 0.f;
        for (int64_t t = 0; t < n; ++t) { sh[t] = std::exp(sh[t] - mx); sum += sh[t]; }
        l[hq] += sum;
        m[hq] = mx;
        float* a = acc.data() + hq * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) a[d] *= corr;
      }
      for (int64_t t = 0; t < n; ++t) {          // acc += p x V, row by row (read once, in order)
        const float* vr = vb + t * tok_stride;
        for (int64_t hq = 0; hq < H; ++hq) {
          const float p = s[hq * BS + t];
          const float* vh = vr + (hq / G) * D;
          float* a = acc.data() + hq * D;
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) a[d] += p * vh[d];
        }
      }
    }
    float* ob = op + b * H * D;
    for (int64_t hq = 0; hq < H; ++hq) {
      const float inv = l[hq] > 0.f ? 1.f / l[hq] : 0.f;
      for (int64_t d = 0; d < D; ++d) ob[hq * D + d] = acc[hq * D + d] * inv;
    }
  }
}
}  // namespace

// q [B, H, D]; cache [2, NB, BS, KVH, D] (K then V); block_tables [B, MAXNB] int32; seq_lens [B] int32;
// out [B, H, D]. Sequences are split into `threads` contiguous ranges of about equal context.
extern "C" void paged_decode(const float* q, const float* cache, const int32_t* block_tables,
                             const int32_t* seq_lens, float* out, int64_t B, int64_t H, int64_t D, int64_t NB,
                             int64_t BS, int64_t KVH, int64_t MAXNB, float scale, int64_t threads) {
  Args A{q, cache, cache + NB * BS * KVH * D, block_tables, seq_lens, out,
         H, D, BS, H / KVH, MAXNB, KVH * D, BS * KVH * D, scale};
  threads = std::max<int64_t>(1, std::min<int64_t>(threads, B));
  if (threads == 1) { run_range(A, 0, B); return; }
  int64_t total = 0;
  for (int64_t b = 0; b < B; ++b) total += seq_lens[b];
  std::vector<int64_t> cut{0};
  int64_t acc = 0;
  for (int64_t b = 0; b < B && (int64_t)cut.size() < threads; ++b) {
    acc += seq_lens[b];
    if (acc * threads >= total * (int64_t)cut.size()) cut.push_back(b + 1);
  }
  cut.push_back(B);
  std::vector<std::thread> pool;
  for (size_t i = 1; i + 1 < cut.size(); ++i) pool.emplace_back(run_range, std::cref(A), cut[i], cut[i + 1]);
  run_range(A, cut[0], cut[1]);
  for (auto& t : pool) t.join();
}
"""
ENABLED = os.environ.get("REFENGINE_CPU_KERNELS", "1") != "0"
_FLAGS = ["-O3", "-march=native", "-fopenmp-simd", "-std=c++17", "-shared", "-fPIC", "-pthread"]


def _cache_dir() -> Path:
    root = os.environ.get("LLMBENCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "llmbench")
    return Path(root) / "kernels"


def _cpu_flags() -> list[str]:
    """This CPU's instruction-set flags: what -march=native compiles for.

    The `flags` line of /proc/cpuinfo on x86 Linux (`Features` on ARM); elsewhere only
    platform.processor(), which is coarser but still tells CPU families apart."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() in ("flags", "Features"):
                    return value.split()
    except OSError:
        pass
    return [platform.processor()]


def _key() -> str:
    """Everything the built object depends on, readable: its hash names the file, and it is written beside it.

    The CPU flags are in it because a -march=native object may use any instruction this CPU has."""
    return (
        f"source sha256: {hashlib.sha256(_SOURCE.encode()).hexdigest()}\n"
        f"compiler flags: {' '.join(_FLAGS)}\n"
        f"machine: {platform.machine()}\n"
        f"cpu flags: {' '.join(sorted(set(_cpu_flags())))}\n"
    )


def _library_path() -> Path:
    return _cache_dir() / f"cpu_paged_decode-{hashlib.sha256(_key().encode()).hexdigest()[:16]}.so"


@functools.lru_cache(maxsize=None)
def _library() -> ctypes.CDLL:
    """Compile once per source, flags, machine and CPU (a few seconds), then load the cached .so.

    Built into a temporary file and renamed into place, so concurrent processes never load a
    half-written library."""
    lib = _library_path()
    if not lib.exists():
        cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
        if cxx is None:
            raise RuntimeError("no C++ compiler (g++ / c++) on PATH")
        lib.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:
            src, out = Path(tmp) / "k.cpp", Path(tmp) / "k.so"
            src.write_text(_SOURCE)
            subprocess.run([cxx, *_FLAGS, str(src), "-o", str(out)], check=True, capture_output=True, timeout=120)
            (Path(tmp) / "k.txt").write_text(_key())
            os.replace(Path(tmp) / "k.txt", lib.with_suffix(".txt"))  # first: every cached .so has its note
            os.replace(out, lib)
    cdll = ctypes.CDLL(str(lib))
    f = cdll.paged_decode
    f.restype = None
    f.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 7 + [ctypes.c_float, ctypes.c_int64]
    return cdll


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether the kernel is built (building it on the first call); False where it cannot be."""
    if not ENABLED:
        return False
    try:
        _library()
        return True
    # No compiler (RuntimeError, or OSError for a $CXX that is not there), a failed or hung build
    # (SubprocessError), a cache or library that cannot be written or loaded (OSError), a library
    # without the symbol (AttributeError): the PyTorch path runs.
    except (OSError, RuntimeError, subprocess.SubprocessError, AttributeError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        log.warning(
            "CPU paged decode kernel unavailable (%s: %s %s); using the PyTorch path",
            type(exc).__name__,
            exc,
            detail.decode(errors="replace")[:200],
        )
        return False


# Context bytes (K and V) each thread must read before a call splits over threads. The threads are
# started per call beside torch's OpenMP workers, which spin for milliseconds after each op on the
# cores those threads need; on a 2-core AMX Xeon a second thread cost a `tiny` float32 decode step
# of 2-4 sequences 3-4 ms and gained at most 2% at 64 (bench/cpu_decode_paths.py, docs/engine.md).
MIN_BYTES_PER_THREAD = 32 << 20


def threads_for(kv_bytes: int) -> int:
    """How many threads a call reading `kv_bytes` of context uses: torch's count at most, one per
    MIN_BYTES_PER_THREAD, at least one."""
    return max(1, min(torch.get_num_threads(), kv_bytes // MIN_BYTES_PER_THREAD))


def applies(q: torch.Tensor, kv_cache: torch.Tensor) -> bool:
    return (
        ENABLED
        and q.device.type == "cpu"
        and kv_cache.dtype == torch.float32
        and kv_cache.is_contiguous()
        and available()
    )


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
    AttentionMetadata; the cache is float32 and contiguous (see `applies`)."""
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
    _library().paged_decode(
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
        threads_for(int(lens.sum()) * kv_heads * head_dim * 2 * 4),
    )
    return out
