"""A decoder layer's elementwise ops on CPU, each one C++ pass: add + RMSNorm, RoPE, SiLU x up.

Why: in eager PyTorch each of these is a chain of small ops (RMSNorm with its residual add is nine:
add, cast, square, mean, add, rsqrt, multiply, cast, multiply; RoPE twelve for q and k), every one
a dispatch and a pass over the activations. A decode step's activations are a few rows, so the
step pays the dispatches, not the arithmetic: on the AMX Xeon one pass each saved about a tenth of a
one-sequence bfloat16 `tiny` step (MAX_ROWS below; docs/engine.md). vLLM's CPU backend fuses
them with inductor; here each is one loop over the rows, in float32 inside, reading and writing
float32 or bfloat16 (widened and rounded to nearest even as torch does), so the results match the
PyTorch path up to float32 summation order (tests/refengine/kernels/test_cpu_layer_ops.py).

Built and loaded by kernels/cpu_build.py; `REFENGINE_CPU_KERNELS=0` turns it off, and where it
cannot be built the layers' PyTorch code runs.
"""

from __future__ import annotations

import ctypes

import torch

from refengine.kernels.cpu_build import CppLibrary, enabled_by_env

_SOURCE = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

namespace {
typedef uint16_t bf16;
inline float widen(float x) { return x; }
inline float widen(bf16 x) { uint32_t u = uint32_t(x) << 16; float f; std::memcpy(&f, &u, 4); return f; }
inline void put(float* p, float v) { *p = v; }
inline void put(bf16* p, float v) {  // round to nearest even, as torch's float -> bfloat16
  uint32_t u; std::memcpy(&u, &v, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) { *p = bf16((u >> 16) | 0x40u); return; }  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  *p = bf16(u >> 16);
}
template <class T> inline float round_trip(float v) { T t; put(&t, v); return widen(t); }

// residual += x (rounded to T), out = weight * T(residual * rsqrt(mean(residual^2) + eps)).
// Without a residual (res == nullptr): out = weight * T(x * rsqrt(mean(x^2) + eps)).
template <class T>
void add_rms_norm(const T* x, T* res, const T* w, T* out, int64_t rows, int64_t n, int64_t x_stride, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * x_stride;
    T* rr = res ? res + r * n : nullptr;
    T* orow = out + r * n;
    float ss = 0.f;
    if (rr) {
      for (int64_t i = 0; i < n; ++i) {
        const float s = round_trip<T>(widen(xr[i]) + widen(rr[i]));
        put(rr + i, s);
        ss += s * s;
      }
    } else {
#pragma omp simd reduction(+:ss)
      for (int64_t i = 0; i < n; ++i) { const float v = widen(xr[i]); ss += v * v; }
    }
    const float inv = 1.f / std::sqrt(ss / float(n) + eps);
    const T* src = rr ? rr : xr;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) put(orow + i, widen(w[i]) * round_trip<T>(widen(src[i]) * inv));
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
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
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
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
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
"""

ENABLED = enabled_by_env()
_P, _I, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16"}


def _declare(cdll: ctypes.CDLL) -> None:
    for suffix in _SUFFIX.values():
        for name, returns, args in (
            ("add_rms_norm", None, [_P, _P, _P, _P, _I, _I, _I, _F]),
            ("rope", _I, [_P, _P, _I, _I, _I, _I, _P, _P, _I]),
            ("silu_and_mul", None, [_P, _P, _I, _I]),
        ):
            f = getattr(cdll, f"{name}_{suffix}")
            f.restype, f.argtypes = returns, args


LIBRARY = CppLibrary("cpu_layer_ops", _SOURCE, _declare, "CPU layer ops kernel")


# Rows above which the PyTorch chain is left to run: the kernels are one thread, their exp scalar,
# and what they save is per-op dispatch, which more rows amortize. On the 2-core AMX Xeon a `tiny`
# bfloat16 decode step with them took 11.5 / 13.5 / 19.6 / 37.7 ms at 1 / 4 / 16 / 64 sequences
# against 12.6 / 14.0 / 19.2 / 34.6 without (float32: 17.0 / 23.8 / 41.4 / 81.7 against 17.6 / 24.9 /
# 42.0 / 81.2; bench/cpu_decode_paths.py, bench/RESULTS.md).
MAX_ROWS = 8


def applies(x: torch.Tensor) -> bool:
    """Whether these kernels take a tensor: on CPU, float32 or bfloat16, at most MAX_ROWS rows, the
    kernels on and built."""
    return (
        ENABLED
        and x.device.type == "cpu"
        and x.dtype in _SUFFIX
        and x.dim() == 2
        and x.shape[0] <= MAX_ROWS
        and LIBRARY.available()
    )


def _rows(x: torch.Tensor) -> tuple[int, int]:
    """(rows, row stride) of a 2-D tensor whose last dim is contiguous."""
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError(
            f"a 2-D tensor with contiguous rows is needed, got shape {tuple(x.shape)} strides {x.stride()}"
        )
    return x.shape[0], x.stride(0)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """RMSNorm of x, or of x + residual (then the residual is updated in place and returned)."""
    rows, stride = _rows(x)
    n = x.shape[1]
    if residual is not None and (
        not residual.is_contiguous() or residual.shape != x.shape or residual.dtype != x.dtype
    ):
        raise ValueError("the residual must be a contiguous tensor of x's shape and dtype")
    if weight.dtype != x.dtype or weight.shape != (n,) or not weight.is_contiguous():
        raise ValueError("the weight must be contiguous, of x's dtype, one per column")
    out = torch.empty(rows, n, dtype=x.dtype)
    fn = getattr(LIBRARY.load(), f"add_rms_norm_{_SUFFIX[x.dtype]}")
    fn(
        x.data_ptr(),
        residual.data_ptr() if residual is not None else None,
        weight.data_ptr(),
        out.data_ptr(),
        rows,
        n,
        stride,
        eps,
    )
    return out, residual


def rope(x: torch.Tensor, positions: torch.Tensor, table: torch.Tensor, head_dim: int) -> torch.Tensor:
    """Neox RoPE of x [T, heads x head_dim] (rows may be strided, as a split of qkv is), a new tensor."""
    rows, stride = _rows(x)
    if x.shape[1] % head_dim or head_dim % 2 or table.dtype != torch.float32 or not table.is_contiguous():
        raise ValueError("x must hold whole heads of an even head_dim and the table be contiguous float32")
    pos = positions.to(torch.int64).contiguous()
    if pos.shape[0] != rows:
        raise ValueError(f"one position per row: {pos.shape[0]} positions for {rows} rows")
    out = torch.empty(rows, x.shape[1], dtype=x.dtype)
    fn = getattr(LIBRARY.load(), f"rope_{_SUFFIX[x.dtype]}")
    heads = x.shape[1] // head_dim
    bad = fn(
        x.data_ptr(), out.data_ptr(), rows, heads, head_dim, stride, pos.data_ptr(), table.data_ptr(), table.shape[0]
    )
    if bad:
        raise IndexError(f"{bad} positions outside the rotary table's {table.shape[0]}")
    return out


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x [T, 2n] = [gate | up] -> silu(gate) x up [T, n]."""
    x = x.contiguous()
    rows, _ = _rows(x)
    n = x.shape[1] // 2
    out = torch.empty(rows, n, dtype=x.dtype)
    getattr(LIBRARY.load(), f"silu_and_mul_{_SUFFIX[x.dtype]}")(x.data_ptr(), out.data_ptr(), rows, n)
    return out
