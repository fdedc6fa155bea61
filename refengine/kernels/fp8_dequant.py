"""FP8 weight dequantization in Triton: w8 [N, K] x scale -> the compute dtype, in one pass.

Handles every scale kind of numerics/fp8.py by index arithmetic on the scale tensor: per-tensor
(one value: both strides 0), per-channel ([N, 1]: row stride 1, column stride 0) and blocks
([ceil(N/B), ceil(K/B)]: each element reads the scale of tile (row // B, col // B)). The weight-only
path calls it right before F.linear on GPUs without FP8 tensor cores, and for block scales.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from refengine.numerics.fp8 import BLOCK, scale_kind


@triton.jit
def _dequant_kernel(
    w_ptr,
    s_ptr,
    out_ptr,
    N,
    K,
    stride_wn,
    stride_on,
    stride_sn,
    stride_sk,
    SCALE_BLOCK: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    cols = tl.program_id(1) * BK + tl.arange(0, BK)
    mask = (rows[:, None] < N) & (cols[None, :] < K)
    w = tl.load(w_ptr + rows[:, None] * stride_wn + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    s = tl.load(
        s_ptr + (rows // SCALE_BLOCK)[:, None] * stride_sn + (cols // SCALE_BLOCK)[None, :] * stride_sk,
        mask=mask,
        other=0.0,
    )
    tl.store(out_ptr + rows[:, None] * stride_on + cols[None, :], (w * s).to(out_ptr.dtype.element_ty), mask=mask)


def fp8_dequantize_triton(
    w8: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, block: int = BLOCK
) -> torch.Tensor:
    n, k = w8.shape
    kind = scale_kind(scale, (n, k))
    scale = scale.float().contiguous()
    if kind == "tensor":
        sn, sk, sblock = 0, 0, 1
    elif kind == "channel":
        sn, sk, sblock = 1, 0, 1
    else:
        sn, sk, sblock = scale.stride(0), scale.stride(1), block
    w8 = w8.contiguous()
    out = torch.empty(n, k, dtype=dtype, device=w8.device)
    bn, bk = 32, 64
    _dequant_kernel[(triton.cdiv(n, bn), triton.cdiv(k, bk))](
        w8, scale, out, n, k, w8.stride(0), out.stride(0), sn, sk, SCALE_BLOCK=sblock, BN=bn, BK=bk
    )
    return out
