"""A decoder layer's elementwise ops on CPU, each one C++ pass: add + RMSNorm, RoPE, SiLU x up.

Why: in eager PyTorch each of these is a chain of small ops (RMSNorm with its residual add is nine:
add, cast, square, mean, add, rsqrt, multiply, cast, multiply; RoPE twelve for q and k), every one
a dispatch and a pass over the activations. A decode step's activations are a few rows, so the
step pays the dispatches, not the arithmetic: on the AMX Xeon one pass each saved about a tenth of a
one-sequence bfloat16 `tiny` step (docs/engine.md, "Layer ops"; which rows they take: applies()). vLLM's CPU backend fuses
them with inductor; here each is one loop over the rows, in float32 inside, reading and writing
float32 or bfloat16 (widened and rounded to nearest even as torch does), so the results match the
PyTorch path up to float32 summation order (tests/refengine/kernels/test_cpu_layer_ops.py).

Built and loaded by kernels/cpu_build.py; `REFENGINE_CPU_KERNELS=0` turns it off, and where it
cannot be built the layers' PyTorch code runs.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from refengine.kernels.cpu_build import CppLibrary, enabled_by_env

# The C++ beside this file (its top says how it rounds and where it vectorizes).
_SOURCE = "".join((Path(__file__).parent / name).read_text() for name in ("cpu_simd.h", "cpu_layer_ops.cpp"))
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


# The kernels run on the calling thread; PyTorch's vectorized ops split a large tensor over its OpenMP
# team. Vectorized (AVX-512), the three together took 0.18-0.71x PyTorch's time at every size measured
# on the 2-core AMX Xeon (1-2,048 rows at hidden 64 and 1,024), on one torch thread and on two; SiLU x
# up alone was up to 1.2x slower on two threads at 64-256 rows of hidden 1,024 (docs/engine.md,
# "Layer ops"; bench/layer_ops_sizes.py). Beyond
# MEASURED_THREADS torch threads nothing was measured, and a wide OpenMP team can beat one thread on a
# large tensor, so there they keep to a decode's rows (up to MAX_ROWS_BESIDE_MANY_THREADS), where
# PyTorch's per-op dispatch is the cost. (Their first, scalar version lost from 16 rows on one thread
# and was capped at 8 rows everywhere.)
MEASURED_THREADS = 2
MAX_ROWS_BESIDE_MANY_THREADS = 64


def applies(x: torch.Tensor) -> bool:
    """Whether these kernels take a tensor: on CPU, float32 or bfloat16, any rows on up to
    MEASURED_THREADS torch threads and at most MAX_ROWS_BESIDE_MANY_THREADS on more, the kernels on
    and built."""
    return (
        ENABLED
        and x.device.type == "cpu"
        and x.dtype in _SUFFIX
        and x.dim() == 2
        and (x.shape[0] <= MAX_ROWS_BESIDE_MANY_THREADS or torch.get_num_threads() <= MEASURED_THREADS)
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
