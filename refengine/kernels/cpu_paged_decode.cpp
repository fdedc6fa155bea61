// Paged decode attention on CPU (loaded by kernels/cpu_paged_decode.py, which says why it exists).
//
// One work item is a whole sequence: each cache row holds all KV heads side by side, so one pass
// over the rows reads them contiguously. The query heads that share a KV head (GQA) are scored
// against each key row as it is read, and the softmax is online (running max and sum), so nothing
// is copied, padded or read twice. The cache is float32 or bfloat16 (read as uint16_t and widened
// to float32 as it is loaded: bfloat16 is float32's top half, so the widening is exact); the
// arithmetic is float32 either way.
//
// Two bodies, the same algorithm: on a CPU with AVX-512 and a head size that is a multiple of 16,
// the dot products, the block's exponentials and the value updates run 16 lanes at a time (the
// scalar body's exp, one call per score, was most of a call); elsewhere a portable body the
// compiler vectorizes where it can.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

inline float widen(float x) { return x; }
inline float widen(uint16_t x) {
  const uint32_t bits = uint32_t(x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <typename T>
struct Args {
  const float* qp;  // [B, H, D]
  const T *kbase, *vbase;
  const int32_t *bt, *lens;
  float* op;  // [B, H, D]
  int64_t H, D, BS, G, MAXNB, tok_stride, blk_stride;
  float sc;
};

// Per-thread scratch: the running output, the block's scores and the running max and sum of each head.
struct Scratch {
  std::vector<float> acc, s, m, l;
  Scratch(int64_t H, int64_t D, int64_t BS) : acc(H * D), s(H * BS), m(H), l(H) {}
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
  Scratch w(H, D, BS);
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
          w.s[hq * BS + t] = dot * A.sc;
        }
      }
      for (int64_t hq = 0; hq < H; ++hq) {  // online softmax: rescale what came before
        float* sh = w.s.data() + hq * BS;
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
          const float p = w.s[hq * BS + t];
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
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

// exp of 16 lanes: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its degree-6 Taylor polynomial
// (relative error ~1e-7, float32's own), times 2^n by scalef. Inputs are scores minus their
// running max (<= 0); below -87 the result is clamped to ~1e-38 instead of a denormal.
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // ln2 in two parts (Cody-Waite)
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.f / 720.f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

inline __mmask16 first(int64_t k) { return k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << k) - 1); }

template <typename T>
void run_range_avx512(const Args<T>& A, int64_t begin, int64_t end) {
  const int64_t H = A.H, D = A.D, BS = A.BS, G = A.G, V = D / 16;
  Scratch w(H, D, BS);
  for (int64_t b = begin; b < end; ++b) {
    const int64_t len = A.lens[b];
    const float* qb = A.qp + b * H * D;
    w.reset();
    for (int64_t j = 0; j * BS < len; ++j) {
      const int64_t blk = A.bt[b * A.MAXNB + j], n = std::min(BS, len - j * BS);
      const T* kb = A.kbase + blk * A.blk_stride;
      const T* vb = A.vbase + blk * A.blk_stride;
      for (int64_t t = 0; t < n; ++t) {
        const T* kr = kb + t * A.tok_stride;
        for (int64_t hq = 0; hq < H; ++hq) {
          const float* qh = qb + hq * D;
          const T* kh = kr + (hq / G) * D;
          __m512 dot = _mm512_setzero_ps();
          for (int64_t v = 0; v < V; ++v) dot = _mm512_fmadd_ps(_mm512_loadu_ps(qh + 16 * v), load16(kh + 16 * v), dot);
          w.s[hq * BS + t] = _mm512_reduce_add_ps(dot) * A.sc;
        }
      }
      for (int64_t hq = 0; hq < H; ++hq) {
        float* sh = w.s.data() + hq * BS;
        float mx = w.m[hq];
        for (int64_t c = 0; c < n; c += 16)
          mx = std::max(mx, _mm512_mask_reduce_max_ps(first(n - c), _mm512_maskz_loadu_ps(first(n - c), sh + c)));
        const float corr = std::exp(w.m[hq] - mx);
        __m512 sum = _mm512_setzero_ps();
        const __m512 mxv = _mm512_set1_ps(mx);
        for (int64_t c = 0; c < n; c += 16) {
          const __mmask16 k = first(n - c);
          const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, sh + c), mxv));
          _mm512_mask_storeu_ps(sh + c, k, e);
          sum = _mm512_mask_add_ps(sum, k, sum, e);
        }
        w.l[hq] = w.l[hq] * corr + _mm512_reduce_add_ps(sum);
        w.m[hq] = mx;
        float* a = w.acc.data() + hq * D;
        const __m512 cv = _mm512_set1_ps(corr);
        for (int64_t v = 0; v < V; ++v) _mm512_storeu_ps(a + 16 * v, _mm512_mul_ps(_mm512_loadu_ps(a + 16 * v), cv));
      }
      for (int64_t t = 0; t < n; ++t) {
        const T* vr = vb + t * A.tok_stride;
        for (int64_t hq = 0; hq < H; ++hq) {
          const __m512 p = _mm512_set1_ps(w.s[hq * BS + t]);
          const T* vh = vr + (hq / G) * D;
          float* a = w.acc.data() + hq * D;
          for (int64_t v = 0; v < V; ++v)
            _mm512_storeu_ps(a + 16 * v, _mm512_fmadd_ps(p, load16(vh + 16 * v), _mm512_loadu_ps(a + 16 * v)));
        }
      }
    }
    write_out(A, w, b);
  }
}
#endif

template <typename T>
void run_range(const Args<T>& A, int64_t begin, int64_t end) {
#if defined(__AVX512F__)
  if (A.D % 16 == 0) {
    run_range_avx512(A, begin, end);
    return;
  }
#endif
  run_range_portable(A, begin, end);
}

// q [B, H, D] float32; cache [2, NB, BS, KVH, D] (K then V); block_tables [B, MAXNB] int32; seq_lens [B]
// int32; out [B, H, D] float32. Sequences are split into `threads` contiguous ranges of about equal context.
template <typename T>
void paged_decode_impl(const float* q, const T* cache, const int32_t* block_tables, const int32_t* seq_lens,
                       float* out, int64_t B, int64_t H, int64_t D, int64_t NB, int64_t BS, int64_t KVH,
                       int64_t MAXNB, float scale, int64_t threads) {
  const Args<T> A{q, cache, cache + NB * BS * KVH * D, block_tables, seq_lens, out,
                  H, D, BS, H / KVH, MAXNB, KVH * D, BS * KVH * D, scale};
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
                             int64_t BS, int64_t KVH, int64_t MAXNB, float scale, int64_t threads) {
  paged_decode_impl(q, cache, block_tables, seq_lens, out, B, H, D, NB, BS, KVH, MAXNB, scale, threads);
}

// The same over a bfloat16 cache (its elements' bits as uint16_t).
extern "C" void paged_decode_bf16(const float* q, const uint16_t* cache, const int32_t* block_tables,
                                  const int32_t* seq_lens, float* out, int64_t B, int64_t H, int64_t D, int64_t NB,
                                  int64_t BS, int64_t KVH, int64_t MAXNB, float scale, int64_t threads) {
  paged_decode_impl(q, cache, block_tables, seq_lens, out, B, H, D, NB, BS, KVH, MAXNB, scale, threads);
}
