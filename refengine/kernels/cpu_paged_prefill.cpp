// Paged prefill attention on CPU (loaded by kernels/cpu_paged_prefill.py, which says why it exists).
//
// A work item is one (prefill, KV head). Its context (positions 0 .. start + n - 1, read through the
// block table) is copied once into contiguous rows. Then the prompt's query rows are taken a tile at a
// time: R rows x the G query heads that share the KV head (GQA), R x G <= TILE query vectors (TILE: the
// float32 lanes of a vector register, 16 with AVX-512, 8 with AVX2), one per lane of every vector
// register, scored against TILE keys at a time: for each head dimension, one load of the vectors'
// elements and TILE fused multiply-adds by each key's element (broadcast from its row), so a key
// tile's loads are shared by all the tile's query vectors (the decode kernel, one query row at a time,
// has nothing to share them with). With the query vectors in lanes, the online softmax (running max
// and sum, as flash attention does) is lane-wise arithmetic across the TILE score registers, with no
// horizontal reductions. Causality is a lane mask (key position <= the lane's position) on the tiles
// that reach past the row tile's first position. P x V runs the same way: per TILE output dimensions,
// TILE accumulators, each key's probabilities (one vector) times its value elements (broadcast).
//
// A float32 cache: float32 throughout. A bfloat16 cache where the CPU has AVX-512 BF16: queries, keys,
// values and probabilities as bfloat16 pairs into float32 sums (vdpbf16ps: two products per lane per
// instruction, twice float32's rate; flash attention on GPUs multiplies in bfloat16 the same way);
// without it, widened exactly to float32 as it is copied. AVX-512 or AVX2 with FMA only, head sizes of
// up to 128 in steps of TILE and at most TILE query heads per KV head (`prefill_supported` says whether
// this build has the body); elsewhere the caller keeps SDPA.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

#if defined(VECTOR_LANES)
using namespace simd;
constexpr int64_t TILE = VECTOR_LANES;  // query vectors per row tile (one per lane), keys per key tile

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

// The TILE lanes of one tile of query rows: lane j is row row_of[j] of query head head_of[j], at
// position pos[j]; lanes past the last vector repeat it (computed, not written).
struct RowTile {
  int64_t row_of[TILE], head_of[TILE], vectors = 0, first_pos, last_key;
  vec pos;

  RowTile(int64_t r0, int64_t R, int64_t G, int64_t h, int64_t n, int64_t start) {
    alignas(64) float p[TILE];
    for (int64_t j = 0; j < TILE; ++j) {
      const int64_t jj = std::min(j, R * G - 1);
      row_of[j] = std::min(r0 + jj / G, n - 1);
      head_of[j] = h * G + jj % G;
      p[j] = float(start + row_of[j]);
      if (j < R * G && r0 + j / G < n) vectors = j + 1;
    }
    pos = vload(p);
    first_pos = start + r0;
    last_key = start + std::min(r0 + R, n) - 1;
  }
};

// One key tile's scores s[k] (lane = query vector) become its probabilities, online: m and l, the
// lanes' running max and sum, move on, and the factor the running outputs must be scaled by returns.
// Key 0 is in tile 0, so every lane's max is finite after the first tile; a tile wholly past a lane's
// position leaves it as it was (factor 1, no probability).
inline vec softmax_tile(vec s[TILE], const RowTile& rt, int64_t tile, vec& m, vec& l) {
  const bool diagonal = tile * TILE + TILE - 1 > rt.first_pos;  // only such a tile has keys a lane must not see
  vmask live[TILE];
  vec mx = m;
  for (int k = 0; k < TILE; ++k) {
    live[k] = diagonal ? lanes_le(vset(float(tile * TILE + k)), rt.pos) : all_lanes();
    mx = vmax_where(mx, live[k], s[k]);
  }
  const vec corr = vexp(vsub(m, mx));
  vec sum = vset(0.f);
  for (int k = 0; k < TILE; ++k) {
    s[k] = vkeep(live[k], vexp(vsub(s[k], mx)));
    sum = vadd(sum, s[k]);
  }
  l = vfmadd(l, corr, sum);
  m = mx;
  return corr;
}

// Each written lane's output: its accumulated P x V (acc[d * TILE + lane]) over its sum.
template <int64_t D>
void write_rows(const float* acc, vec l, const RowTile& rt, int64_t tok0, int64_t H, float* out) {
  alignas(64) float inv[TILE];
  vstore(inv, vdiv(vset(1.f), l));
  for (int64_t j = 0; j < rt.vectors; ++j) {
    float* o = out + ((tok0 + rt.row_of[j]) * H + rt.head_of[j]) * D;
    for (int64_t d = 0; d < D; ++d) o[d] = acc[d * TILE + j] * inv[j];
  }
}

// float32 arithmetic: K and V widened into float32 rows (zeros past the context: masked, never NaN).
template <typename T, int V>
void run_item(const Args<T>& A, int64_t p, int64_t h, std::vector<float>& kf, std::vector<float>& vf) {
  constexpr int64_t D = TILE * V;
  const int64_t H = A.H, KVH = A.KVH, BS = A.BS, G = H / KVH, R = std::max<int64_t>(1, TILE / G);
  const int64_t tok0 = A.rows[3 * p], n = A.rows[3 * p + 1], start = A.rows[3 * p + 2];
  const int64_t L = start + n, ntiles = (L + TILE - 1) / TILE;
  const int32_t* table = A.tables + p * A.MAXNB;
  kf.assign(ntiles * TILE * D, 0.f);
  vf.assign(ntiles * TILE * D, 0.f);
  for (int64_t t = 0; t < L; ++t) {
    const int64_t row = (int64_t(table[t / BS]) * BS + t % BS) * KVH * D + h * D;
    for (int64_t d = 0; d < D; ++d) {
      kf[t * D + d] = widen(A.kbase[row + d]);
      vf[t * D + d] = widen(A.vbase[row + d]);
    }
  }
  alignas(64) float qt[D * TILE], acc[D * TILE], prob[TILE * TILE];  // [d][lane], [d][lane], [key][lane]
  for (int64_t r0 = 0; r0 < n; r0 += R) {
    const RowTile rt(r0, R, G, h, n, start);
    for (int j = 0; j < TILE; ++j) {
      const float* qr = A.q + ((tok0 + rt.row_of[j]) * H + rt.head_of[j]) * D;
      for (int64_t d = 0; d < D; ++d) qt[d * TILE + j] = qr[d] * A.sc;
    }
    vec m = vset(-INFINITY), l = vset(0.f);
    std::fill(acc, acc + D * TILE, 0.f);
    for (int64_t tile = 0; tile <= rt.last_key / TILE; ++tile) {
      const float* ktile = kf.data() + tile * TILE * D;
      vec s[TILE];
      for (int k = 0; k < TILE; ++k) s[k] = vset(0.f);
      for (int64_t d = 0; d < D; ++d) {
        const vec qd = vload(qt + d * TILE);
        for (int k = 0; k < TILE; ++k) s[k] = vfmadd(qd, vset(ktile[k * D + d]), s[k]);
      }
      const vec corr = softmax_tile(s, rt, tile, m, l);
      for (int k = 0; k < TILE; ++k) vstore(prob + TILE * k, s[k]);
      const float* vtile = vf.data() + tile * TILE * D;
      for (int v = 0; v < V; ++v) {  // TILE output dimensions at a time: TILE accumulators
        vec a[TILE];
        for (int i = 0; i < TILE; ++i) a[i] = vmul(vload(acc + (TILE * v + i) * TILE), corr);
        for (int k = 0; k < TILE; ++k) {
          const vec pk = vload(prob + TILE * k);
          const float* vk = vtile + k * D + TILE * v;
          for (int i = 0; i < TILE; ++i) a[i] = vfmadd(pk, vset(vk[i]), a[i]);
        }
        for (int i = 0; i < TILE; ++i) vstore(acc + (TILE * v + i) * TILE, a[i]);
      }
    }
    write_rows<D>(acc, l, rt, tok0, H, A.out);
  }
}

#if defined(__AVX512BF16__)
// float32 to bfloat16, rounded to nearest even (a bfloat16 model's queries are bfloat16 values already).
inline uint16_t narrow(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return uint16_t((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}

// Two adjacent bfloat16 (one 32-bit lane's pair), broadcast to all 16 lanes.
inline __m512bh pair16(const uint16_t* two) {
  int32_t bits;
  std::memcpy(&bits, two, sizeof bits);
  return (__m512bh)_mm512_set1_epi32(bits);
}

// Lane j: (a[j], b[j]) as a bfloat16 pair, a in the low half.
inline __m512bh pair_lanes(__m512 a, __m512 b) {
  const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(a));
  const __m512i hi = _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(b)), 16);
  return (__m512bh)_mm512_or_si512(lo, hi);
}

// bfloat16 products, float32 sums (vdpbf16ps: lane j += a.lo x b.lo + a.hi x b.hi), the scale applied
// to the sums. K rows are copied as they are (pairs of head dimensions are adjacent); V is copied with
// pairs of keys interleaved ([key / 2][d][2]) so that one broadcast carries a dimension of two keys.
template <int V>
void run_item_bf16(const Args<uint16_t>& A, int64_t p, int64_t h, std::vector<uint16_t>& kb,
                   std::vector<uint16_t>& vb) {
  static_assert(TILE == 16, "AVX-512 BF16 implies AVX-512: 16-lane tiles");
  constexpr int64_t D = 16 * V;
  const int64_t H = A.H, KVH = A.KVH, BS = A.BS, G = H / KVH, R = std::max<int64_t>(1, 16 / G);
  const int64_t tok0 = A.rows[3 * p], n = A.rows[3 * p + 1], start = A.rows[3 * p + 2];
  const int64_t L = start + n, ntiles = (L + 15) / 16;
  const int32_t* table = A.tables + p * A.MAXNB;
  kb.assign(ntiles * 16 * D, 0);  // bfloat16 zeros past the context: masked, never NaN
  vb.assign(ntiles * 16 * D, 0);
  for (int64_t t = 0; t < L; ++t) {
    const int64_t row = (int64_t(table[t / BS]) * BS + t % BS) * KVH * D + h * D;
    std::memcpy(kb.data() + t * D, A.kbase + row, D * sizeof(uint16_t));
    uint16_t* vpair = vb.data() + (t / 2) * 2 * D + t % 2;
    for (int64_t d = 0; d < D; ++d) vpair[2 * d] = A.vbase[row + d];
  }
  alignas(64) uint16_t qt[D * 16];  // [d / 2][lane][d % 2]
  alignas(64) float acc[D * 16];    // [d][lane]
  __m512bh prob[8];                 // [key / 2]: lane j is (p[key], p[key + 1]) of query vector j
  const __m512 sc = _mm512_set1_ps(A.sc);
  for (int64_t r0 = 0; r0 < n; r0 += R) {
    const RowTile rt(r0, R, G, h, n, start);
    for (int j = 0; j < 16; ++j) {
      const float* qr = A.q + ((tok0 + rt.row_of[j]) * H + rt.head_of[j]) * D;
      for (int64_t d = 0; d < D; ++d) qt[(d / 2) * 32 + 2 * j + d % 2] = narrow(qr[d]);
    }
    __m512 m = _mm512_set1_ps(-INFINITY), l = _mm512_setzero_ps();
    std::fill(acc, acc + D * 16, 0.f);
    for (int64_t tile = 0; tile <= rt.last_key / 16; ++tile) {
      const uint16_t* ktile = kb.data() + tile * 16 * D;
      __m512 s[16];
      for (int k = 0; k < 16; ++k) s[k] = _mm512_setzero_ps();
      for (int64_t d = 0; d < D; d += 2) {
        const __m512bh qd = (__m512bh)_mm512_load_si512(qt + d * 16);
        for (int k = 0; k < 16; ++k) s[k] = _mm512_dpbf16_ps(s[k], qd, pair16(ktile + k * D + d));
      }
      for (int k = 0; k < 16; ++k) s[k] = _mm512_mul_ps(s[k], sc);
      const __m512 corr = softmax_tile(s, rt, tile, m, l);
      for (int k = 0; k < 8; ++k) prob[k] = pair_lanes(s[2 * k], s[2 * k + 1]);
      const uint16_t* vtile = vb.data() + tile * 16 * D;
      for (int v = 0; v < V; ++v) {  // 16 output dimensions at a time: 16 accumulators
        __m512 a[16];
        for (int i = 0; i < 16; ++i) a[i] = _mm512_mul_ps(_mm512_load_ps(acc + (16 * v + i) * 16), corr);
        for (int k = 0; k < 8; ++k) {
          const uint16_t* vk = vtile + k * 2 * D + 2 * 16 * v;
          for (int i = 0; i < 16; ++i) a[i] = _mm512_dpbf16_ps(a[i], prob[k], pair16(vk + 2 * i));
        }
        for (int i = 0; i < 16; ++i) _mm512_store_ps(acc + (16 * v + i) * 16, a[i]);
      }
    }
    write_rows<D>(acc, l, rt, tok0, H, A.out);
  }
}
#endif

// Items [begin, end) of the P x KVH (prefill, KV head) pairs, in order.
template <typename T, int V>
void run_items(const Args<T>& A, int64_t begin, int64_t end) {
#if defined(__AVX512BF16__)
  if constexpr (std::is_same_v<T, uint16_t>) {
    std::vector<uint16_t> kb, vb;
    for (int64_t i = begin; i < end; ++i) run_item_bf16<V>(A, i / A.KVH, i % A.KVH, kb, vb);
    return;
  }
#endif
  std::vector<float> kf, vf;
  for (int64_t i = begin; i < end; ++i) run_item<T, V>(A, i / A.KVH, i % A.KVH, kf, vf);
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

// The body compiled for head sizes of 1 .. 128 / TILE vectors; `V` counts up to the call's.
template <typename T, int V = 1>
void prefill_vectors(const Args<T>& A, int64_t P, int64_t threads, int64_t vectors) {
  if constexpr (V * TILE <= 128) {
    if (vectors == V) return prefill_impl<T, V>(A, P, threads);
    prefill_vectors<T, V + 1>(A, P, threads, vectors);
  }
}

template <typename T>
void dispatch(const float* q, const T* cache, const int32_t* tables, const int64_t* rows, float* out, int64_t P,
              int64_t H, int64_t D, int64_t NB, int64_t BS, int64_t KVH, int64_t MAXNB, float scale, int64_t threads) {
  const Args<T> A{q, cache, cache + NB * BS * KVH * D, tables, rows, out, H, KVH, BS, MAXNB, scale};
  if (D % TILE == 0) prefill_vectors(A, P, threads, D / TILE);  // else prefill_supported() said no
}
#endif

}  // namespace

// 1 when this build has the vector body and it takes head size `D` with `G` query heads per KV head.
extern "C" int64_t prefill_supported(int64_t D, int64_t G) {
#if defined(VECTOR_LANES)
  return D % TILE == 0 && D >= TILE && D <= 128 && G >= 1 && G <= TILE ? 1 : 0;
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
#if defined(VECTOR_LANES)
  dispatch(q, cache, tables, rows, out, P, H, D, NB, BS, KVH, MAXNB, scale, threads);
#endif
}

// The same over a bfloat16 cache (its elements' bits as uint16_t).
extern "C" void paged_prefill_bf16(const float* q, const uint16_t* cache, const int32_t* tables,
                                   const int64_t* rows, float* out, int64_t P, int64_t H, int64_t D, int64_t NB,
                                   int64_t BS, int64_t KVH, int64_t MAXNB, float scale, int64_t threads) {
#if defined(VECTOR_LANES)
  dispatch(q, cache, tables, rows, out, P, H, D, NB, BS, KVH, MAXNB, scale, threads);
#endif
}
