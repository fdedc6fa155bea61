"""One bfloat16 row times a bfloat16 weight on CPU: a C++ loop that streams the weight once at memory speed.

Why: a decode step of one sequence is a chain of one-row linears, and each reads its whole weight
for one dot product per output: the step is as fast as the weights stream. On one core of the AMX
Xeon oneDNN's packed bfloat16 inner product and F.linear stream the `tiny` model's 33 decode-step
weights (188 MB) at 10.4-10.5 GB/s, while the core reads memory at about 13.4 GB/s (a float32 sum
over as many bytes); vLLM's whole one-sequence step there is shorter than refengine's linears alone
(bench/RESULTS.md, "Where a bfloat16 decode step goes"). Here each group of four weight rows is read
once, in order, against the row held in registers, with AVX-512 BF16's dot-product instruction
(bfloat16 pairs multiplied, summed in float32, as oneDNN does), and each output rounded to bfloat16
to nearest-even as F.linear rounds it.

One row only: from two rows the product reuses each weight element across rows and oneDNN's
blocked kernels are faster (this loop lost 1.4x at four rows in the same check). Applies only where
the CPU has AVX-512 BF16, the inner dimension is a multiple of 32 and the weight is contiguous;
built and loaded as the other CPU kernels (kernels/cpu_build.py), off with `REFENGINE_CPU_KERNELS=0`.
Tested against F.linear in float32 in tests/refengine/kernels/test_cpu_gemv.py.
"""

from __future__ import annotations

import ctypes

import torch

from refengine.kernels.cpu_build import CppLibrary, cpu_flags, enabled_by_env

_SOURCE = r"""
#include <immintrin.h>
#include <cstdint>
#include <cstring>

namespace {
inline uint16_t to_bf16(float f) {  // round to nearest even, as a float32 -> bfloat16 cast does
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b += 0x7FFF + ((b >> 16) & 1);
  return (uint16_t)(b >> 16);
}

inline __m512bh load(const uint16_t* p) { return (__m512bh)_mm512_loadu_si512(p); }
}  // namespace

// out[n] = sum_k x[k] * w[n, k]; x [K], w [N, K] row-major, K % 32 == 0.
extern "C" void gemv_bf16(const uint16_t* x, const uint16_t* w, int64_t N, int64_t K, uint16_t* out) {
  int64_t n = 0;
  for (; n + 4 <= N; n += 4) {  // four weight rows in flight: four streams for the prefetcher
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const uint16_t* w0 = w + n * K;
    for (int64_t k = 0; k < K; k += 32) {
      const __m512bh xv = load(x + k);
      a0 = _mm512_dpbf16_ps(a0, xv, load(w0 + k));
      a1 = _mm512_dpbf16_ps(a1, xv, load(w0 + K + k));
      a2 = _mm512_dpbf16_ps(a2, xv, load(w0 + 2 * K + k));
      a3 = _mm512_dpbf16_ps(a3, xv, load(w0 + 3 * K + k));
    }
    out[n] = to_bf16(_mm512_reduce_add_ps(a0));
    out[n + 1] = to_bf16(_mm512_reduce_add_ps(a1));
    out[n + 2] = to_bf16(_mm512_reduce_add_ps(a2));
    out[n + 3] = to_bf16(_mm512_reduce_add_ps(a3));
  }
  for (; n < N; ++n) {
    __m512 a = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 32) a = _mm512_dpbf16_ps(a, load(x + k), load(w + n * K + k));
    out[n] = to_bf16(_mm512_reduce_add_ps(a));
  }
}
"""
ENABLED = enabled_by_env()
HAS_BF16_DOT = "avx512_bf16" in cpu_flags()
K_MULTIPLE = 32  # bfloat16 elements in one AVX-512 register


def _declare(cdll: ctypes.CDLL) -> None:
    f = cdll.gemv_bf16
    f.restype = None
    f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]


LIBRARY = CppLibrary("cpu_gemv", _SOURCE, _declare, "CPU bfloat16 GEMV kernel")


def applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """One bfloat16 row against a contiguous bfloat16 weight whose inner dimension is a multiple of
    32, on a CPU with AVX-512 BF16, the kernels on and built."""
    return (
        ENABLED
        and HAS_BF16_DOT
        and x.device.type == "cpu"
        and x.dtype == torch.bfloat16
        and weight.dtype == torch.bfloat16
        and x.numel() == x.shape[-1]
        and x.shape[-1] % K_MULTIPLE == 0
        and weight.dim() == 2
        and weight.shape[1] == x.shape[-1]
        and weight.is_contiguous()
        and LIBRARY.available()
    )


def linear_one_row(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear(x, weight, bias) for one row (see `applies`); x's leading dims are kept."""
    n, k = weight.shape
    row = x.reshape(k).contiguous()
    out = torch.empty(n, dtype=torch.bfloat16)
    LIBRARY.load().gemv_bf16(row.data_ptr(), weight.data_ptr(), n, k, out.data_ptr())
    if bias is not None:
        out = out + bias
    return out.view(*x.shape[:-1], n)
