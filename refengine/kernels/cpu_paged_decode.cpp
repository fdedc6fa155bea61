// Paged decode attention on CPU (loaded by kernels/cpu_paged_decode.py, which says why it exists).
//
// One work item is a whole sequence: each cache row holds all KV heads side by side, so one pass
// over the rows reads them contiguously. The query heads that share a KV head (GQA) are scored
// against each key row as it is read, and the softmax is online (running max and sum), so nothing
// is copied, padded or read twice. The cache is float32 or bfloat16 (read as uint16_t and widened
// to float32 as it is loaded: bfloat16 is float32's top half, so the widening is exact); the
// arithmetic is float32 either way.
//
// Two bodies, the same algorithm: on a CPU with AVX-512 (16 float32 lanes) or AVX2 and FMA (8), and a
// head size of up to 128 in steps of the lanes, tiles of as many tokens as lanes: their scores as one
// vector (a transpose-and-add tree instead of a horizontal sum per score), one vector exponential for
// them (the scalar body's exp, one call per score, was most of a call), the head's query and output
// in registers, the next tile's rows prefetched across the heads; elsewhere a portable body the
// compiler vectorizes where it can.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

using simd::widen;

template <typename T>
struct Args {
  const float* qp;  // [B, H, D]
  const T *kbase, *vbase;
  const int32_t *bt, *lens;
  float* op;  // [B, H, D]
  int64_t H, D, BS, G, MAXNB, tok_stride, blk_stride;
  float sc;
  bool prefetch;  // ask for the next tile's rows ahead (off only to measure what it buys)
};

// Per-thread scratch: the running output and the running max and sum of each head.
struct Scratch {
  std::vector<float> acc, m, l;
  Scratch(int64_t H, int64_t D) : acc(H * D), m(H), l(H) {}
  void reset() {
    std::fill(acc.begin(), acc.end(), 0.f);
    std::fill(m.begin(), m.end(), -INFINITY);
    std::fill(l.begin(), l.end(), 0.f);
  }
};

template <typename T>
void write_out(const Args<T>& A, Scratch& w, int64_t b) {
  float* ob = A.op + b * A.H * A.D;
  for (int64_t hq = 0; hq < A.H; ++hq) {
    const float inv = w.l[hq] > 0.f ? 1.f / w.l[hq] : 0.f;
    for (int64_t d = 0; d < A.D; ++d) ob[hq * A.D + d] = w.acc[hq * A.D + d] * inv;
  }
}

template <typename T>
void run_range_portable(const Args<T>& A, int64_t begin, int64_t end) {
  const int64_t H = A.H, D = A.D, BS = A.BS, G = A.G;
  Scratch w(H, D);
  std::vector<float> scores(H * BS);  // the block's scores, per head
  for (int64_t b = begin; b < end; ++b) {
    const int64_t len = A.lens[b];
    const float* qb = A.qp + b * H * D;
    w.reset();
    for (int64_t j = 0; j * BS < len; ++j) {
      const int64_t blk = A.bt[b * A.MAXNB + j], n = std::min(BS, len - j * BS);
      const T* kb = A.kbase + blk * A.blk_stride;
      const T* vb = A.vbase + blk * A.blk_stride;
      for (int64_t t = 0; t < n; ++t) {  // scores of every query head against key row t
        const T* kr = kb + t * A.tok_stride;
        for (int64_t hq = 0; hq < H; ++hq) {  // query head hq reads KV head hq / G
          const float* qh = qb + hq * D;
          const T* kh = kr + (hq / G) * D;
          float dot = 0.f;
#pragma omp simd reduction(+ : dot)
          for (int64_t d = 0; d < D; ++d) dot += qh[d] * widen(kh[d]);
          scores[hq * BS + t] = dot * A.sc;
        }
      }
      for (int64_t hq = 0; hq < H; ++hq) {  // online softmax: rescale what came before
        float* sh = scores.data() + hq * BS;
        float mx = w.m[hq];
        for (int64_t t = 0; t < n; ++t) mx = std::max(mx, sh[t]);
        const float corr = std::exp(w.m[hq] - mx);
        float sum = 0.f;
        for (int64_t t = 0; t < n; ++t) {
          sh[t] = std::exp(sh[t] - mx);
          sum += sh[t];
        }
        w.l[hq] = w.l[hq] * corr + sum;
        w.m[hq] = mx;
        float* a = w.acc.data() + hq * D;
#pragma omp simd
        for (int64_t d = 0; d < D; ++d) a[d] *= corr;
      }
      for (int64_t t = 0; t < n; ++t) {  // acc += p x V, row by row (read once, in order)
        const T* vr = vb + t * A.tok_stride;
        for (int64_t hq = 0; hq < H; ++hq) {
          const float p = scores[hq * BS + t];
          const T* vh = vr + (hq / G) * D;
          float* a = w.acc.data() + hq * D;
#pragma omp simd
          for (int64_t d = 0; d < D; ++d) a[d] += p * widen(vh[d]);
        }
      }
    }
    write_out(A, w, b);
  }
}

#if defined(VECTOR_LANES)
using namespace simd;
constexpr int64_t TILE = VECTOR_LANES;  // tokens per tile: one score per lane

// One K row and one V row asked of memory ahead of their use (see run_range_vector).
template <typename T>
inline void prefetch_row(const T* k, const T* v, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(k) + off, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(v) + off, _MM_HINT_T0);
  }
}

// V = head_dim / TILE vectors, a compile-time count so that a head's query and running output stay in
// registers. The context is walked in tiles of TILE tokens (across block boundaries): per query head,
// the tile's scores come out as one vector, get one online-softmax update, and the tile's value rows
// are accumulated into the head's output.
template <typename T, int V>
void run_range_vector(const Args<T>& A, int64_t begin, int64_t end) {
  const int64_t H = A.H, D = A.D, BS = A.BS, G = A.G;
  Scratch w(H, D);
  alignas(64) float p[TILE];
  const vec scale = vset(A.sc);
  for (int64_t b = begin; b < end; ++b) {
    const int64_t len = A.lens[b];
    const float* qb = A.qp + b * H * D;
    const int32_t* table = A.bt + b * A.MAXNB;
    w.reset();
    for (int64_t t0 = 0; t0 < len; t0 += TILE) {
      const int64_t n = std::min<int64_t>(TILE, len - t0);
      const T* krow[TILE];
      const T* vrow[TILE];
      for (int64_t t = 0; t < TILE; ++t) {  // past the context's end: its last row again (masked out)
        const int64_t pos = t0 + std::min(t, n - 1);
        const int64_t row = table[pos / BS] * A.blk_stride + (pos % BS) * A.tok_stride;
        krow[t] = A.kbase + row;
        vrow[t] = A.vbase + row;
      }
      // The next tile's rows, one by one across this tile's heads: a sequence's blocks lie anywhere in
      // the cache and the other layers evicted them since the last step, and without asking ahead the
      // loads of a tile keep only a few misses in flight (8 layers of 64 cold sequences of 270 tokens
      // read a bfloat16 cache at 6.4 GB/s, no faster than a float32 one). Spread over the heads: the
      // whole next tile asked for at once, at the tile's start, gained nothing (bench/decode_prefetch.py
      // measures this form).
      const int64_t next_n = A.prefetch ? std::min<int64_t>(TILE, len - t0 - TILE) : 0;
      const T* nk[TILE];
      const T* nv[TILE];
      for (int64_t t = 0; t < next_n; ++t) {
        const int64_t pos = t0 + TILE + t;
        const int64_t row = table[pos / BS] * A.blk_stride + (pos % BS) * A.tok_stride;
        nk[t] = A.kbase + row;
        nv[t] = A.vbase + row;
      }
      const int64_t row_bytes = A.tok_stride * (int64_t)sizeof(T);
      for (int64_t hq = 0; hq < H; ++hq) {
        for (int64_t t = hq; t < next_n; t += H) prefetch_row(nk[t], nv[t], row_bytes);
        const int64_t off = (hq / G) * D;  // query head hq reads KV head hq / G
        vec q[V], d[TILE], a[V];
        for (int v = 0; v < V; ++v) q[v] = vload(qb + hq * D + TILE * v);
        for (int t = 0; t < TILE; ++t) {
          vec s = vmul(q[0], vload(krow[t] + off));
          for (int v = 1; v < V; ++v) s = vfmadd(q[v], vload(krow[t] + off + TILE * v), s);
          d[t] = s;
        }
        const vec scores = vmul(lane_sums(d), scale);
        const float mx = std::max(w.m[hq], max_first(scores, n));
        // online softmax: rescale what came before (by the vector exp: a scalar call per tile and head
        // was a sixth of a call's time; exp(-inf) clamps to ~1e-38, which only ever multiplies zeros)
        const float corr = mx == w.m[hq] ? 1.f : vfirst(vexp(vset(w.m[hq] - mx)));
        const vec e = keep_first(vexp(vsub(scores, vset(mx))), n);
        w.l[hq] = w.l[hq] * corr + vsum(e);
        w.m[hq] = mx;
        vstore(p, e);
        float* acc = w.acc.data() + hq * D;
        const vec cv = vset(corr);
        for (int v = 0; v < V; ++v) a[v] = vmul(vload(acc + TILE * v), cv);
        for (int64_t t = 0; t < n; ++t) {  // acc += p x V over the tile's rows
          const vec pv = vset(p[t]);
          for (int v = 0; v < V; ++v) a[v] = vfmadd(pv, vload(vrow[t] + off + TILE * v), a[v]);
        }
        for (int v = 0; v < V; ++v) vstore(acc + TILE * v, a[v]);
      }
    }
    write_out(A, w, b);
  }
}

// The vector body compiled for head sizes of 1 .. 128 / TILE vectors; `V` counts up to the call's.
template <typename T, int V = 1>
void run_range_vectors(const Args<T>& A, int64_t begin, int64_t end, int64_t vectors) {
  if constexpr (V * TILE <= 128) {
    if (vectors == V) return run_range_vector<T, V>(A, begin, end);
    return run_range_vectors<T, V + 1>(A, begin, end, vectors);
  }
  run_range_portable(A, begin, end);
}
#endif

template <typename T>
void run_range(const Args<T>& A, int64_t begin, int64_t end) {
#if defined(VECTOR_LANES)
  if (A.D % TILE == 0) return run_range_vectors(A, begin, end, A.D / TILE);  // head sizes TILE to 128
#endif
  run_range_portable(A, begin, end);
}

// q [B, H, D] float32; cache [2, NB, BS, KVH, D] (K then V); block_tables [B, MAXNB] int32; seq_lens [B]
// int32; out [B, H, D] float32. Sequences are split into `threads` contiguous ranges of about equal context.
template <typename T>
void paged_decode_impl(const float* q, const T* cache, const int32_t* block_tables, const int32_t* seq_lens,
                       float* out, int64_t B, int64_t H, int64_t D, int64_t NB, int64_t BS, int64_t KVH,
                       int64_t MAXNB, float scale, int64_t threads, int64_t prefetch) {
  const Args<T> A{q, cache, cache + NB * BS * KVH * D, block_tables, seq_lens, out,
                  H, D, BS, H / KVH, MAXNB, KVH * D, BS * KVH * D, scale, prefetch != 0};
  threads = std::max<int64_t>(1, std::min<int64_t>(threads, B));
  if (threads == 1) {
    run_range(A, 0, B);
    return;
  }
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
  for (size_t i = 1; i + 1 < cut.size(); ++i) pool.emplace_back(run_range<T>, std::cref(A), cut[i], cut[i + 1]);
  run_range(A, cut[0], cut[1]);
  for (auto& t : pool) t.join();
}

}  // namespace

extern "C" void paged_decode(const float* q, const float* cache, const int32_t* block_tables,
                             const int32_t* seq_lens, float* out, int64_t B, int64_t H, int64_t D, int64_t NB,
                             int64_t BS, int64_t KVH, int64_t MAXNB, float scale, int64_t threads,
                             int64_t prefetch) {
  paged_decode_impl(q, cache, block_tables, seq_lens, out, B, H, D, NB, BS, KVH, MAXNB, scale, threads, prefetch);
}

// The same over a bfloat16 cache (its elements' bits as uint16_t).
extern "C" void paged_decode_bf16(const float* q, const uint16_t* cache, const int32_t* block_tables,
                                  const int32_t* seq_lens, float* out, int64_t B, int64_t H, int64_t D, int64_t NB,
                                  int64_t BS, int64_t KVH, int64_t MAXNB, float scale, int64_t threads,
                                  int64_t prefetch) {
  paged_decode_impl(q, cache, block_tables, seq_lens, out, B, H, D, NB, BS, KVH, MAXNB, scale, threads, prefetch);
}
