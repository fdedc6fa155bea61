// Shared by the CPU kernels (cpu_paged_decode.cpp, cpu_layer_ops.cpp): prepended to each one's source
// by its Python loader, so each library's cache key covers it (kernels/cpu_build.py).
//
// bfloat16 is stored as uint16_t: float32's top half, so widening is exact (a shift).
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__)
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

#if defined(__AVX512F__)
// 16 elements as float32 lanes.
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

// exp of 16 lanes: x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its degree-6 Taylor polynomial
// (relative error ~1e-7, float32's own), times 2^n by scalef; x is clamped to [-87, 88], float32's
// normal range (so exp(-inf) is ~1e-38, not a denormal or NaN).
inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.f)), _mm512_set1_ps(88.f));
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

// The first k of 16 lanes.
inline __mmask16 first(int64_t k) { return k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << k) - 1); }
#endif
}  // namespace simd
