// Shared by the CPU kernels (cpu_paged_decode.cpp, cpu_paged_prefill.cpp, cpu_layer_ops.cpp): prepended to each one's source
// by its Python loader, so each library's cache key covers it (kernels/cpu_build.py).
//
// bfloat16 is stored as uint16_t: float32's top half, so widening is exact (a shift).
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace simd {
inline float widen(float x) { return x; }
inline float widen(uint16_t x) {
  const uint32_t bits = uint32_t(x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// exp of a vector: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its degree-6 Taylor polynomial
// (relative error ~1e-7, float32's own), times 2^n; x is clamped to [-87, 88], float32's normal range
// (so exp(-inf) is ~1e-38, not a denormal or NaN). The constants, shared by every width's body:
namespace exp_poly {
constexpr float lo = -87.f, hi = 88.f, log2e = 1.44269504088896341f;
constexpr float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;  // ln2 in two parts (Cody-Waite)
constexpr float coef[7] = {1.f / 720.f, 1.f / 120.f, 1.f / 24.f, 1.f / 6.f, 0.5f, 1.f, 1.f};  // Horner, highest first
}  // namespace exp_poly

#if defined(__AVX512F__)
// 16 elements as float32 lanes.
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

// exp of 16 lanes (see exp_poly), 2^n by scalef.
inline __m512 exp16(__m512 x) {
  using namespace exp_poly;
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(log2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(ln2_lo), _mm512_fnmadd_ps(n, _mm512_set1_ps(ln2_hi), x));
  __m512 p = _mm512_set1_ps(coef[0]);
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(coef[i]));
  return _mm512_scalef_ps(p, n);
}

// The first k of 16 lanes.
inline __mmask16 first(int64_t k) { return k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << k) - 1); }
#endif

// The widest float32 vector this CPU has, as one set of names, for loops that are the same at any
// width (the layer ops): `vec` of LANES lanes, 16 with AVX-512, 8 with AVX2 and FMA (an AVX2 host
// otherwise ran those loops scalar, exponentials included). VECTOR_LANES is undefined without either.
#if defined(__AVX512F__)
#define VECTOR_LANES 16
using vec = __m512;
inline vec vload(const float* p) { return _mm512_loadu_ps(p); }
inline vec vload(const uint16_t* p) { return load16(p); }
inline void vstore(float* p, vec v) { _mm512_storeu_ps(p, v); }
inline vec vset(float x) { return _mm512_set1_ps(x); }
inline vec vadd(vec a, vec b) { return _mm512_add_ps(a, b); }
inline vec vsub(vec a, vec b) { return _mm512_sub_ps(a, b); }
inline vec vmul(vec a, vec b) { return _mm512_mul_ps(a, b); }
inline vec vdiv(vec a, vec b) { return _mm512_div_ps(a, b); }
inline vec vfmadd(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }  // a x b + c
inline vec vfmsub(vec a, vec b, vec c) { return _mm512_fmsub_ps(a, b, c); }  // a x b - c
inline float vsum(vec v) { return _mm512_reduce_add_ps(v); }
inline vec vexp(vec x) { return exp16(x); }
// Each lane rounded to bfloat16 as torch rounds (to nearest even; a NaN stays a NaN): its bits in
// the lane's low half.
inline __m512i bf16_bits(vec v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
}
inline void vstore(uint16_t* p, vec v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(bf16_bits(v)));
}
inline vec bf16_round_trip(vec v) { return _mm512_castsi512_ps(_mm512_slli_epi32(bf16_bits(v), 16)); }
inline float vfirst(vec v) { return _mm512_cvtss_f32(v); }
// Lane masks: which lanes an operation touches.
using vmask = __mmask16;
inline vmask all_lanes() { return 0xFFFF; }
inline vmask lanes_le(vec a, vec b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }
inline vec vmax_where(vec a, vmask m, vec b) { return _mm512_mask_max_ps(a, m, a, b); }  // max(a, b) in m, else a
inline vec vkeep(vmask m, vec x) { return _mm512_maskz_mov_ps(m, x); }                 // x in m, else 0
inline vec keep_first(vec v, int64_t n) { return _mm512_maskz_mov_ps(first(n), v); }  // lanes from n: 0
inline float max_first(vec v, int64_t n) { return _mm512_mask_reduce_max_ps(first(n), v); }
// The sums of 16 vectors, one per lane (lane t: the sum of d[t]'s lanes): a transpose-and-add tree,
// 45 shuffles and adds where 16 horizontal reductions take about 150.
inline vec lane_sums(const vec d[16]) {
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
#elif defined(__AVX2__) && defined(__FMA__)
#define VECTOR_LANES 8
using vec = __m256;
inline vec vload(const float* p) { return _mm256_loadu_ps(p); }
inline vec vload(const uint16_t* p) {
  const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}
inline void vstore(float* p, vec v) { _mm256_storeu_ps(p, v); }
inline vec vset(float x) { return _mm256_set1_ps(x); }
inline vec vadd(vec a, vec b) { return _mm256_add_ps(a, b); }
inline vec vsub(vec a, vec b) { return _mm256_sub_ps(a, b); }
inline vec vmul(vec a, vec b) { return _mm256_mul_ps(a, b); }
inline vec vdiv(vec a, vec b) { return _mm256_div_ps(a, b); }
inline vec vfmadd(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
inline vec vfmsub(vec a, vec b, vec c) { return _mm256_fmsub_ps(a, b, c); }
inline float vsum(vec v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
// exp16's method 8 lanes at a time; AVX2 has no scalef, so 2^n is built in the exponent field (n is
// within [-126, 127] after the clamp: a normal float).
inline vec vexp(vec x) {
  using namespace exp_poly;
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(lo)), _mm256_set1_ps(hi));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(ln2_lo), _mm256_fnmadd_ps(n, _mm256_set1_ps(ln2_hi), x));
  __m256 p = _mm256_set1_ps(coef[0]);
  for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(coef[i]));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}
inline __m256i bf16_bits(vec v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
}
inline void vstore(uint16_t* p, vec v) {
  const __m256i bits = bf16_bits(v);  // eight 32-bit lanes, each < 2^16: packing cannot saturate
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}
inline vec bf16_round_trip(vec v) { return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_bits(v), 16)); }
inline float vfirst(vec v) { return _mm256_cvtss_f32(v); }
using vmask = __m256;  // all ones in a lane the mask holds
inline vmask all_lanes() { return _mm256_castsi256_ps(_mm256_set1_epi32(-1)); }
inline vmask lanes_le(vec a, vec b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }
inline vec vmax_where(vec a, vmask m, vec b) { return _mm256_blendv_ps(a, _mm256_max_ps(a, b), m); }
inline vec vkeep(vmask m, vec x) { return _mm256_and_ps(m, x); }
inline __m256 first_mask(int64_t n) {  // all ones in the lanes below n
  return _mm256_cmp_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_ps(float(n)), _CMP_LT_OQ);
}
inline vec keep_first(vec v, int64_t n) { return _mm256_and_ps(v, first_mask(n)); }
inline float max_first(vec v, int64_t n) {
  v = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), v, first_mask(n));
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
// The sums of 8 vectors, one per lane (lane t: the sum of d[t]'s lanes): two rounds of pairwise
// horizontal adds leave each 128-bit half with four rows' half-sums, and the halves are added.
inline vec lane_sums(const vec d[8]) {
  const __m256 y0 = _mm256_hadd_ps(_mm256_hadd_ps(d[0], d[1]), _mm256_hadd_ps(d[2], d[3]));
  const __m256 y1 = _mm256_hadd_ps(_mm256_hadd_ps(d[4], d[5]), _mm256_hadd_ps(d[6], d[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(y0, y1, 0x20), _mm256_permute2f128_ps(y0, y1, 0x31));
}
#endif
}  // namespace simd
