"""Paged decode attention on CPU: one C++ loop that reads K/V in place through the block table.

Why: the PyTorch path (attention/reference.py) gathers every decode's context into a padded
[B, max_context] copy and reads it again in SDPA; on CPU that copy and its padding cost more than
the attention arithmetic (bench/RESULTS.md, "Engine performance (issue 16)"). Here each
(sequence, KV head) pair walks its own blocks once, the query heads that share the KV head (GQA)
are scored together against each key row as it is read, and the softmax is online (running max
and sum, as flash attention does), so nothing is copied, padded or read twice. A work item is a
whole sequence: each cache row holds all KV heads side by side, so one pass over the rows reads
them contiguously (a (sequence, head) split reads a quarter of every row and drags in the rest).

Plain C++ with no torch headers, compiled on first use and cached, keyed by the CPU's
instruction-set flags, called through ctypes (kernels/cpu_build.py). It splits the sequences into ranges of about equal context on std::threads started per call
(no second OpenMP runtime spins beside torch's), one per MIN_BYTES_PER_THREAD of context read, up
to torch.get_num_threads(): below that a second thread waits on torch's spinning workers longer
than it saves. It degrades cleanly: float32 contiguous caches only; if the
build fails, `available()` is False and the PyTorch path runs. `REFENGINE_CPU_KERNELS=0` turns it
off. Tested against the PyTorch oracle in tests/refengine/kernels/test_cpu_paged_decode.py.
"""

from __future__ import annotations

import ctypes

import torch

from refengine.kernels.cpu_build import CppLibrary, enabled_by_env

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
ENABLED = enabled_by_env()


def _declare(cdll: ctypes.CDLL) -> None:
    f = cdll.paged_decode
    f.restype = None
    f.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 7 + [ctypes.c_float, ctypes.c_int64]


LIBRARY = CppLibrary("cpu_paged_decode", _SOURCE, _declare, "CPU paged decode kernel")


def available() -> bool:
    """Whether the kernel is on and built (building it on the first call); False where it cannot be."""
    return ENABLED and LIBRARY.available()


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
    LIBRARY.load().paged_decode(
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
