// A decoder layer's elementwise ops on CPU (loaded by kernels/cpu_layer_ops.py, which says why).
//
// Each op is one pass over its rows, float32 inside, reading and writing float32 or bfloat16
// (bfloat16 stored as uint16_t: widened exactly on load, rounded to nearest even on store, as
// torch rounds). Where torch rounds an intermediate to the tensor's dtype (the residual sum, the
// normalized value before the weight, silu before the multiply), so do these, so the results match
// the PyTorch path up to float32 summation order.
//
// On a CPU with AVX-512 each loop runs 16 lanes at a time, with AVX2 and FMA 8 (the exponential of
// SiLU included: a polynomial with float32's own accuracy), the rest of a row that is not a multiple
// of the lanes in the portable code; elsewhere the portable code alone. With scalar exponentials and
// roundings these ops cost more than PyTorch's vectorized chains beyond a few rows; vectorized they
// do not.
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

#if defined(VECTOR_LANES)
// The same conversions a vector at a time (simd::vec: 16 lanes with AVX-512, 8 with AVX2).
using namespace simd;
constexpr int64_t L = VECTOR_LANES;
template <class T> inline vec round_trip_v(vec v);
template <> inline vec round_trip_v<float>(vec v) { return v; }
template <> inline vec round_trip_v<bf16>(vec v) { return bf16_round_trip(v); }
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
#if defined(VECTOR_LANES)
    vec ssv = vset(0.f);
    for (; i + L <= n; i += L) {
      vec v = vload(xr + i);
      if (rr) {
        v = round_trip_v<T>(vadd(v, vload(rr + i)));
        vstore(rr + i, v);
      }
      ssv = vfmadd(v, v, ssv);
    }
    ss = vsum(ssv);
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
#if defined(VECTOR_LANES)
    const vec invv = vset(inv);
    for (; i + L <= n; i += L) vstore(orow + i, vmul(vload(w + i), round_trip_v<T>(vmul(vload(src + i), invv))));
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
#if defined(VECTOR_LANES)
      for (; i + L <= half; i += L) {
        const vec a = vload(v + i), b = vload(v + i + half), c = vload(cs + i), s = vload(cs + i + half);
        vstore(o + i, vfmsub(a, c, vmul(b, s)));
        vstore(o + i + half, vfmadd(b, c, vmul(a, s)));
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
#if defined(VECTOR_LANES)
    const vec one = vset(1.f);
    for (; i + L <= n; i += L) {
      const vec gv = vload(g + i);
      const vec silu = vdiv(gv, vadd(one, vexp(vsub(vset(0.f), gv))));
      vstore(o + i, vmul(round_trip_v<T>(silu), vload(u + i)));
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
