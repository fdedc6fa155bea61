// A decoder layer's elementwise ops on CPU (loaded by kernels/cpu_layer_ops.py, which says why).
//
// Each op is one pass over its rows, float32 inside, reading and writing float32 or bfloat16
// (bfloat16 stored as uint16_t: widened exactly on load, rounded to nearest even on store, as
// torch rounds). Where torch rounds an intermediate to the tensor's dtype (the residual sum, the
// normalized value before the weight, silu before the multiply), so do these, so the results match
// the PyTorch path up to float32 summation order.
//
// On a CPU with AVX-512 each loop runs 16 lanes at a time (the exponential of SiLU included: a
// polynomial with float32's own accuracy), the rest of a row that is not a multiple of 16 in the
// portable code; elsewhere the portable code alone. With scalar exponentials and roundings these
// ops cost more than PyTorch's vectorized chains beyond a few rows; vectorized they do not.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace {
typedef uint16_t bf16;
using simd::widen;
inline void put(float* p, float v) { *p = v; }
inline void put(bf16* p, float v) {  // round to nearest even, as torch's float -> bfloat16
  uint32_t u; std::memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) { *p = bf16((u >> 16) | 0x40u); return; }  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  *p = bf16(u >> 16);
}
template <class T> inline float round_trip(float v) { T t; put(&t, v); return widen(t); }

#if defined(__AVX512F__)
// The same conversions 16 lanes at a time.
using simd::load16;
// The bfloat16 bits of each lane (in its low half), rounded as `put` rounds.
inline __m512i bf16_bits(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
}
inline void store16(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
inline void store16(bf16* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(bf16_bits(v)));
}
template <class T> inline __m512 round_trip16(__m512 v);
template <> inline __m512 round_trip16<float>(__m512 v) { return v; }
template <> inline __m512 round_trip16<bf16>(__m512 v) { return _mm512_castsi512_ps(_mm512_slli_epi32(bf16_bits(v), 16)); }

using simd::exp16;
#endif

// residual += x (rounded to T), out = weight * T(residual * rsqrt(mean(residual^2) + eps)).
// Without a residual (res == nullptr): out = weight * T(x * rsqrt(mean(x^2) + eps)).
template <class T>
void add_rms_norm(const T* x, T* res, const T* w, T* out, int64_t rows, int64_t n, int64_t x_stride, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * x_stride;
    T* rr = res ? res + r * n : nullptr;
    T* orow = out + r * n;
    float ss = 0.f;
    int64_t i = 0;
#if defined(__AVX512F__)
    __m512 ssv = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) {
      __m512 v = load16(xr + i);
      if (rr) {
        v = round_trip16<T>(_mm512_add_ps(v, load16(rr + i)));
        store16(rr + i, v);
      }
      ssv = _mm512_fmadd_ps(v, v, ssv);
    }
    ss = _mm512_reduce_add_ps(ssv);
#endif
    for (; i < n; ++i) {
      float v = widen(xr[i]);
      if (rr) {
        v = round_trip<T>(v + widen(rr[i]));
        put(rr + i, v);
      }
      ss += v * v;
    }
    const float inv = 1.f / std::sqrt(ss / float(n) + eps);
    const T* src = rr ? rr : xr;
    i = 0;
#if defined(__AVX512F__)
    const __m512 invv = _mm512_set1_ps(inv);
    for (; i + 16 <= n; i += 16)
      store16(orow + i, _mm512_mul_ps(load16(w + i), round_trip16<T>(_mm512_mul_ps(load16(src + i), invv))));
#endif
    for (; i < n; ++i) put(orow + i, widen(w[i]) * round_trip<T>(widen(src[i]) * inv));
  }
}

// Neox RoPE of rows of `heads` x head_dim (row stride `stride`) into `out` (contiguous), cos|sin from
// `table` [positions, head_dim] (float32: cos in the first half, sin in the second).
// Returns the number of positions outside [0, table_rows) (nothing is written then).
template <class T>
int64_t rope(const T* x, T* out, int64_t rows, int64_t heads, int64_t d, int64_t stride, const int64_t* pos,
             const float* table, int64_t table_rows) {
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) bad += (pos[r] < 0) | (pos[r] >= table_rows);
  if (bad) return bad;
  const int64_t half = d / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const float* cs = table + pos[r] * d;
    for (int64_t h = 0; h < heads; ++h) {
      const T* v = x + r * stride + h * d;
      T* o = out + (r * heads + h) * d;
      int64_t i = 0;
#if defined(__AVX512F__)
      for (; i + 16 <= half; i += 16) {
        const __m512 a = load16(v + i), b = load16(v + i + half), c = _mm512_loadu_ps(cs + i),
                     s = _mm512_loadu_ps(cs + i + half);
        store16(o + i, _mm512_fmsub_ps(a, c, _mm512_mul_ps(b, s)));
        store16(o + i + half, _mm512_fmadd_ps(b, c, _mm512_mul_ps(a, s)));
      }
#endif
      for (; i < half; ++i) {
        const float a = widen(v[i]), b = widen(v[i + half]), c = cs[i], s = cs[i + half];
        put(o + i, a * c - b * s);
        put(o + i + half, b * c + a * s);
      }
    }
  }
  return 0;
}

// out[r] = T(silu(gate)) * up, rounded as torch's two ops round; x [rows, 2n] = [gate | up].
template <class T>
void silu_and_mul(const T* x, T* out, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* g = x + r * 2 * n;
    const T* u = g + n;
    T* o = out + r * n;
    int64_t i = 0;
#if defined(__AVX512F__)
    const __m512 one = _mm512_set1_ps(1.f);
    for (; i + 16 <= n; i += 16) {
      const __m512 gv = load16(g + i);
      const __m512 silu = _mm512_div_ps(gv, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv))));
      store16(o + i, _mm512_mul_ps(round_trip16<T>(silu), load16(u + i)));
    }
#endif
    for (; i < n; ++i) {
      const float gv = widen(g[i]);
      put(o + i, round_trip<T>(gv / (1.f + std::exp(-gv))) * widen(u[i]));
    }
  }
}
}  // namespace

extern "C" {
void add_rms_norm_f32(const float* x, float* res, const float* w, float* out, int64_t rows, int64_t n, int64_t xs, float eps) { add_rms_norm(x, res, w, out, rows, n, xs, eps); }
void add_rms_norm_bf16(const bf16* x, bf16* res, const bf16* w, bf16* out, int64_t rows, int64_t n, int64_t xs, float eps) { add_rms_norm(x, res, w, out, rows, n, xs, eps); }
int64_t rope_f32(const float* x, float* o, int64_t rows, int64_t heads, int64_t d, int64_t stride, const int64_t* pos, const float* t, int64_t n) { return rope(x, o, rows, heads, d, stride, pos, t, n); }
int64_t rope_bf16(const bf16* x, bf16* o, int64_t rows, int64_t heads, int64_t d, int64_t stride, const int64_t* pos, const float* t, int64_t n) { return rope(x, o, rows, heads, d, stride, pos, t, n); }
void silu_and_mul_f32(const float* x, float* out, int64_t rows, int64_t n) { silu_and_mul(x, out, rows, n); }
void silu_and_mul_bf16(const bf16* x, bf16* out, int64_t rows, int64_t n) { silu_and_mul(x, out, rows, n); }
}
