// Paged prefill attention on CPU (loaded by kernels/cpu_paged_prefill.py, which says why it exists).
//
// A work item is one (prefill, KV head). Its context (positions 0 .. start + n - 1, read through the
// block table) is copied once into float32 scratch: K transposed in tiles of 16 tokens ([tile][d][16]),
// V as rows. Then the prompt's query rows are taken a tile at a time: R rows x the G query heads that
// share the KV head (GQA), R x G <= 16 query vectors, scored against each key tile together. For one
// head dimension d, a key tile's 16 values are one vector, and every query vector's 16 scores gain
// q[d] x that vector: 16 accumulators, one load, 16 fused multiply-adds (the tile's loads are shared by
// all the query vectors; the decode kernel, one query row at a time, has nothing to share them with).
// Causality is a lane mask (key position <= the row's position), the softmax is online (running max
// and sum, as flash attention does), and P x V runs the same way: per 16 output dimensions, 16
// accumulators, one value row loaded per key, broadcast by each vector's probability.
//
// AVX-512 only, head sizes 16 to 128 in steps of 16 (`prefill_supported` says whether this build has
// the body); elsewhere the caller keeps PyTorch's SDPA. The cache is float32 or bfloat16 (widened
// exactly as it is copied); the arithmetic is float32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

#if defined(__AVX512F__)
using simd::exp16;
using simd::widen;

template <typename T>
struct Args {
  const float* q;  // [T, H, D] float32
  const T *kbase, *vbase;
  const int32_t* tables;  // [P, MAXNB]
  const int64_t* rows;    // [P, 3]: first token in q, query rows, position of the first row
  float* out;             // [T, H, D] float32
  int64_t H, KVH, BS, MAXNB;
  float sc;
};

template <typename T, int V>
void run_item(const Args<T>& A, int64_t p, int64_t h, std::vector<float>& kt, std::vector<float>& vf) {
  constexpr int64_t D = 16 * V;
  const int64_t H = A.H, KVH = A.KVH, BS = A.BS, G = H / KVH, R = std::max<int64_t>(1, 16 / G), NV = R * G;
  const int64_t tok0 = A.rows[3 * p], n = A.rows[3 * p + 1], start = A.rows[3 * p + 2];
  const int64_t L = start + n, ntiles = (L + 15) / 16;
  const int32_t* table = A.tables + p * A.MAXNB;
  kt.assign(ntiles * D * 16, 0.f);  // zeros past the context's end: masked out, never NaN
  vf.assign(ntiles * 16 * D, 0.f);
  for (int64_t t = 0; t < L; ++t) {
    const int64_t row = (int64_t(table[t / BS]) * BS + t % BS) * KVH * D + h * D;
    float* k = kt.data() + (t / 16) * D * 16 + t % 16;
    float* v = vf.data() + t * D;
    for (int64_t d = 0; d < D; ++d) {
      k[d * 16] = widen(A.kbase[row + d]);
      v[d] = widen(A.vbase[row + d]);
    }
  }
  alignas(64) float qs[16 * D], acc[16 * D], prob[16 * 16];
  float m[16], l[16], corr[16];
  int64_t row_of[16], head_of[16];
  const __m512 iota = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  for (int64_t r0 = 0; r0 < n; r0 += R) {
    __m512 pos[16];
    for (int j = 0; j < 16; ++j) {  // past the last vector: the last one again (computed, not written)
      const int64_t jj = std::min<int64_t>(j, NV - 1);
      row_of[j] = std::min(r0 + jj / G, n - 1);
      head_of[j] = h * G + jj % G;
      pos[j] = _mm512_set1_ps(float(start + row_of[j]));
      const float* qr = A.q + ((tok0 + row_of[j]) * H + head_of[j]) * D;
      for (int64_t d = 0; d < D; ++d) qs[j * D + d] = qr[d] * A.sc;
      m[j] = -INFINITY;
      l[j] = 0.f;
    }
    std::fill(acc, acc + 16 * D, 0.f);
    const int64_t last_key = start + std::min(r0 + R, n) - 1;
    for (int64_t tile = 0; tile <= last_key / 16; ++tile) {
      __m512 s[16];
      for (int j = 0; j < 16; ++j) s[j] = _mm512_setzero_ps();
      const float* ktile = kt.data() + tile * D * 16;
      for (int64_t d = 0; d < D; ++d) {
        const __m512 kd = _mm512_loadu_ps(ktile + d * 16);
        for (int j = 0; j < 16; ++j) s[j] = _mm512_fmadd_ps(_mm512_set1_ps(qs[j * D + d]), kd, s[j]);
      }
      const __m512 key = _mm512_add_ps(iota, _mm512_set1_ps(float(tile * 16)));
      for (int j = 0; j < 16; ++j) {
        // Key 0 is in tile 0, so every vector's running max is finite after the first tile; a later
        // tile wholly past a row's position leaves it as it was (corr 1, no probability).
        const __mmask16 live = _mm512_cmp_ps_mask(key, pos[j], _CMP_LE_OQ);
        const float mx = std::max(m[j], _mm512_mask_reduce_max_ps(live, s[j]));
        corr[j] = mx == m[j] ? 1.f : _mm512_cvtss_f32(exp16(_mm512_set1_ps(m[j] - mx)));
        const __m512 e = _mm512_maskz_mov_ps(live, exp16(_mm512_sub_ps(s[j], _mm512_set1_ps(mx))));
        l[j] = l[j] * corr[j] + _mm512_reduce_add_ps(e);
        m[j] = mx;
        _mm512_store_ps(prob + 16 * j, e);
      }
      const float* vtile = vf.data() + tile * 16 * D;
      for (int v = 0; v < V; ++v) {
        __m512 a[16];
        for (int j = 0; j < 16; ++j) a[j] = _mm512_mul_ps(_mm512_load_ps(acc + j * D + 16 * v), _mm512_set1_ps(corr[j]));
        for (int k = 0; k < 16; ++k) {
          const __m512 vk = _mm512_loadu_ps(vtile + k * D + 16 * v);
          for (int j = 0; j < 16; ++j) a[j] = _mm512_fmadd_ps(_mm512_set1_ps(prob[16 * j + k]), vk, a[j]);
        }
        for (int j = 0; j < 16; ++j) _mm512_store_ps(acc + j * D + 16 * v, a[j]);
      }
    }
    for (int64_t j = 0; j < NV && r0 + j / G < n; ++j) {
      float* o = A.out + ((tok0 + row_of[j]) * H + head_of[j]) * D;
      const float inv = 1.f / l[j];
      for (int64_t d = 0; d < D; ++d) o[d] = acc[j * D + d] * inv;
    }
  }
}

// Items [begin, end) of the P x KVH (prefill, KV head) pairs, in order.
template <typename T, int V>
void run_items(const Args<T>& A, int64_t begin, int64_t end) {
  std::vector<float> kt, vf;
  for (int64_t i = begin; i < end; ++i) run_item<T, V>(A, i / A.KVH, i % A.KVH, kt, vf);
}

template <typename T, int V>
void prefill_impl(const Args<T>& A, int64_t P, int64_t threads) {
  const int64_t items = P * A.KVH;
  threads = std::max<int64_t>(1, std::min(threads, items));
  if (threads == 1) return run_items<T, V>(A, 0, items);
  // Contiguous ranges of about equal work: an item costs about its rows x its context.
  std::vector<double> cost(items);
  double total = 0;
  for (int64_t i = 0; i < items; ++i) {
    const int64_t* r = A.rows + 3 * (i / A.KVH);
    total += cost[i] = double(r[1]) * double(r[1] + r[2]);
  }
  std::vector<int64_t> cut{0};
  double acc = 0;
  for (int64_t i = 0; i < items && (int64_t)cut.size() < threads; ++i) {
    acc += cost[i];
    if (acc * threads >= total * double(cut.size())) cut.push_back(i + 1);
  }
  cut.push_back(items);
  std::vector<std::thread> pool;
  for (size_t i = 1; i + 1 < cut.size(); ++i) pool.emplace_back(run_items<T, V>, std::cref(A), cut[i], cut[i + 1]);
  run_items<T, V>(A, cut[0], cut[1]);
  for (auto& t : pool) t.join();
}

template <typename T>
void dispatch(const float* q, const T* cache, const int32_t* tables, const int64_t* rows, float* out, int64_t P,
              int64_t H, int64_t D, int64_t NB, int64_t BS, int64_t KVH, int64_t MAXNB, float scale, int64_t threads) {
  const Args<T> A{q, cache, cache + NB * BS * KVH * D, tables, rows, out, H, KVH, BS, MAXNB, scale};
  switch (D) {
    case 16: return prefill_impl<T, 1>(A, P, threads);
    case 32: return prefill_impl<T, 2>(A, P, threads);
    case 48: return prefill_impl<T, 3>(A, P, threads);
    case 64: return prefill_impl<T, 4>(A, P, threads);
    case 80: return prefill_impl<T, 5>(A, P, threads);
    case 96: return prefill_impl<T, 6>(A, P, threads);
    case 112: return prefill_impl<T, 7>(A, P, threads);
    case 128: return prefill_impl<T, 8>(A, P, threads);
    default: return;  // prefill_supported() said no: the caller does not call
  }
}
#endif

}  // namespace

// 1 when this build has the AVX-512 body and it takes head size `D` with `G` query heads per KV head.
extern "C" int64_t prefill_supported(int64_t D, int64_t G) {
#if defined(__AVX512F__)
  return D % 16 == 0 && D >= 16 && D <= 128 && G >= 1 && G <= 16 ? 1 : 0;
#else
  (void)D;
  (void)G;
  return 0;
#endif
}

// q [T, H, D] float32; cache [2, NB, BS, KVH, D] (K then V); tables [P, MAXNB] int32, one row per
// prefill; rows [P, 3] int64 (first token, query rows, position of the first row); out [T, H, D]
// float32, written at the prefills' rows only.
extern "C" void paged_prefill(const float* q, const float* cache, const int32_t* tables, const int64_t* rows,
                              float* out, int64_t P, int64_t H, int64_t D, int64_t NB, int64_t BS, int64_t KVH,
                              int64_t MAXNB, float scale, int64_t threads) {
#if defined(__AVX512F__)
  dispatch(q, cache, tables, rows, out, P, H, D, NB, BS, KVH, MAXNB, scale, threads);
#endif
}

// The same over a bfloat16 cache (its elements' bits as uint16_t).
extern "C" void paged_prefill_bf16(const float* q, const uint16_t* cache, const int32_t* tables,
                                   const int64_t* rows, float* out, int64_t P, int64_t H, int64_t D, int64_t NB,
                                   int64_t BS, int64_t KVH, int64_t MAXNB, float scale, int64_t threads) {
#if defined(__AVX512F__)
  dispatch(q, cache, tables, rows, out, P, H, D, NB, BS, KVH, MAXNB, scale, threads);
#endif
}
