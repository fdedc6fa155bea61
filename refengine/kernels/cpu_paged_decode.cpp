// Paged decode attention on CPU (loaded by kernels/cpu_paged_decode.py, which says why it exists).
//
// One work item is a whole sequence: each cache row holds all KV heads side by side, so one pass
// over the rows reads them contiguously. The query heads that share a KV head (GQA) are scored
// against each key row as it is read, and the softmax is online (running max and sum), so nothing
// is copied, padded or read twice. The cache is float32 or bfloat16 (read as uint16_t and widened
// to float32 as it is loaded: bfloat16 is float32's top half, so the widening is exact); the
// arithmetic is float32 either way.
//
// Two bodies, the same algorithm: on a CPU with AVX-512 and a head size of 16 to 128 in steps of 16,
// tiles of 16 tokens: their scores as one vector (a transpose-and-add tree instead of a horizontal
// sum per score), one vector exponential for them (the scalar body's exp, one call per score, was
// most of a call), the head's query and output in registers, the next tile's rows prefetched across
// the heads; elsewhere a portable body the compiler vectorizes where it can.
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

#if defined(__AVX512F__)
using simd::exp16;
using simd::first;
using simd::load16;

// The 16 dot products of one query head against 16 key rows, from their 16 vectors of partial sums:
// a transpose-and-add tree, 45 shuffles and adds where 16 horizontal reductions take about 150.
// Lane t of the result is the sum of d[t]'s lanes.
inline __m512 sum16(const __m512 d[16]) {
  __m512 x[8], y[4], z[2];
  for (int i = 0; i < 8; ++i)  // within 128-bit lanes: pairs of rows interleaved and added
    x[i] = _mm512_add_ps(_mm512_unpacklo_ps(d[2 * i], d[2 * i + 1]), _mm512_unpackhi_ps(d[2 * i], d[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {  // each 128-bit lane now holds four rows' partial sums, in order
    const __m512d a = _mm512_castps_pd(x[2 * i]), b = _mm512_castps_pd(x[2 * i + 1]);
    y[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  for (int i = 0; i < 2; ++i)  // across 128-bit lanes: 0x88 takes lanes 0 and 2 of each, 0xDD lanes 1 and 3
    z[i] = _mm512_add_ps(_mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], 0x88), _mm512_shuffle_f32x4(z[0], z[1], 0xDD));
}

// One K row and one V row asked of memory ahead of their use (see run_range_avx512).
template <typename T>
inline void prefetch_row(const T* k, const T* v, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(k) + off, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(v) + off, _MM_HINT_T0);
  }
}

// V = head_dim / 16 vectors, a compile-time count so that a head's query and running output stay in
// registers. The context is walked in tiles of 16 tokens (across block boundaries): per query head,
// the tile's 16 scores come out as one vector, get one online-softmax update, and the tile's value
// rows are accumulated into the head's output.
template <typename T, int V>
void run_range_avx512(const Args<T>& A, int64_t begin, int64_t end) {
  const int64_t H = A.H, D = A.D, BS = A.BS, G = A.G;
  Scratch w(H, D);
  alignas(64) float p[16];
  const __m512 scale = _mm512_set1_ps(A.sc);
  for (int64_t b = begin; b < end; ++b) {
    const int64_t len = A.lens[b];
    const float* qb = A.qp + b * H * D;
    const int32_t* table = A.bt + b * A.MAXNB;
    w.reset();
    for (int64_t t0 = 0; t0 < len; t0 += 16) {
      const int64_t n = std::min<int64_t>(16, len - t0);
      const __mmask16 live = first(n);
      const T* krow[16];
      const T* vrow[16];
      for (int64_t t = 0; t < 16; ++t) {  // past the context's end: its last row again (masked out)
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
      const int64_t next_n = A.prefetch ? std::min<int64_t>(16, len - t0 - 16) : 0;
      const T* nk[16];
      const T* nv[16];
      for (int64_t t = 0; t < next_n; ++t) {
        const int64_t pos = t0 + 16 + t;
        const int64_t row = table[pos / BS] * A.blk_stride + (pos % BS) * A.tok_stride;
        nk[t] = A.kbase + row;
        nv[t] = A.vbase + row;
      }
      const int64_t row_bytes = A.tok_stride * (int64_t)sizeof(T);
      for (int64_t hq = 0; hq < H; ++hq) {
        for (int64_t t = hq; t < next_n; t += H) prefetch_row(nk[t], nv[t], row_bytes);
        const int64_t off = (hq / G) * D;  // query head hq reads KV head hq / G
        __m512 q[V], d[16], a[V];
        for (int v = 0; v < V; ++v) q[v] = _mm512_loadu_ps(qb + hq * D + 16 * v);
        for (int t = 0; t < 16; ++t) {
          __m512 s = _mm512_mul_ps(q[0], load16(krow[t] + off));
          for (int v = 1; v < V; ++v) s = _mm512_fmadd_ps(q[v], load16(krow[t] + off + 16 * v), s);
          d[t] = s;
        }
        const __m512 scores = _mm512_mul_ps(sum16(d), scale);
        const float mx = std::max(w.m[hq], _mm512_mask_reduce_max_ps(live, scores));
        // online softmax: rescale what came before (by the vector exp: a scalar call per tile and head
        // was a sixth of a call's time; exp(-inf) clamps to ~1e-38, which only ever multiplies zeros)
        const float corr = mx == w.m[hq] ? 1.f : _mm512_cvtss_f32(exp16(_mm512_set1_ps(w.m[hq] - mx)));
        const __m512 e = _mm512_maskz_mov_ps(live, exp16(_mm512_sub_ps(scores, _mm512_set1_ps(mx))));
        w.l[hq] = w.l[hq] * corr + _mm512_reduce_add_ps(e);
        w.m[hq] = mx;
        _mm512_store_ps(p, e);
        float* acc = w.acc.data() + hq * D;
        const __m512 cv = _mm512_set1_ps(corr);
        for (int v = 0; v < V; ++v) a[v] = _mm512_mul_ps(_mm512_loadu_ps(acc + 16 * v), cv);
        for (int64_t t = 0; t < n; ++t) {  // acc += p x V over the tile's rows
          const __m512 pv = _mm512_set1_ps(p[t]);
          for (int v = 0; v < V; ++v) a[v] = _mm512_fmadd_ps(pv, load16(vrow[t] + off + 16 * v), a[v]);
        }
        for (int v = 0; v < V; ++v) _mm512_storeu_ps(acc + 16 * v, a[v]);
      }
    }
    write_out(A, w, b);
  }
}
#endif

template <typename T>
void run_range(const Args<T>& A, int64_t begin, int64_t end) {
#if defined(__AVX512F__)
  switch (A.D % 16 == 0 ? A.D / 16 : 0) {  // head sizes 16 to 128 in steps of 16
    case 1: return run_range_avx512<T, 1>(A, begin, end);
    case 2: return run_range_avx512<T, 2>(A, begin, end);
    case 3: return run_range_avx512<T, 3>(A, begin, end);
    case 4: return run_range_avx512<T, 4>(A, begin, end);
    case 5: return run_range_avx512<T, 5>(A, begin, end);
    case 6: return run_range_avx512<T, 6>(A, begin, end);
    case 7: return run_range_avx512<T, 7>(A, begin, end);
    case 8: return run_range_avx512<T, 8>(A, begin, end);
    default: break;
  }
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
