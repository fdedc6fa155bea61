"""KV-cache store in Triton: write each new token's K and V into its slot, FP8-aware.

One program per token: it reads the token's slot from slot_mapping (a negative slot means
"padding, skip", as in vLLM) and writes all its KV heads. For an FP8 cache the value stored is
clamp(x / scale, +-448) cast to E4M3 (the same rule as numerics/kv_cache.to_cache); otherwise a
plain cast to the cache dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from refengine.numerics.fp8 import FP8_DTYPE, FP8_MAX


@triton.jit
def _store_kv_kernel(
    k_ptr,
    v_ptr,
    cache_ptr,
    slot_ptr,
    k_scale,
    v_scale,
    stride_kt,
    stride_vt,
    stride_c0,
    stride_slot,
    WIDTH: tl.constexpr,
    WIDTH_P: tl.constexpr,
    IS_FP8: tl.constexpr,
    FP8_LIMIT: tl.constexpr,
):
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot >= 0:
        offs = tl.arange(0, WIDTH_P)
        mask = offs < WIDTH
        k = tl.load(k_ptr + t * stride_kt + offs, mask=mask, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + t * stride_vt + offs, mask=mask, other=0.0).to(tl.float32)
        if IS_FP8:
            k = tl.clamp(k / k_scale, -FP8_LIMIT, FP8_LIMIT)
            v = tl.clamp(v / v_scale, -FP8_LIMIT, FP8_LIMIT)
        dst = cache_ptr + slot * stride_slot + offs
        tl.store(dst, k.to(cache_ptr.dtype.element_ty), mask=mask)
        tl.store(dst + stride_c0, v.to(cache_ptr.dtype.element_ty), mask=mask)


def store_kv_triton(
    k: torch.Tensor,
    v: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> None:
    """Same contract as layers/attention.store_kv: k, v [T, kv_heads * head_dim]."""
    _, num_blocks, block_size, kv_heads, head_dim = kv_cache.shape
    width = kv_heads * head_dim
    if not kv_cache.is_contiguous():
        raise ValueError("the Triton KV store needs a contiguous cache")
    k, v = k.reshape(-1, width).contiguous(), v.reshape(-1, width).contiguous()
    _store_kv_kernel[(k.shape[0],)](
        k,
        v,
        kv_cache,
        slot_mapping,
        k_scale,
        v_scale,
        k.stride(0),
        v.stride(0),
        kv_cache.stride(0),
        width,
        WIDTH=width,
        WIDTH_P=triton.next_power_of_2(width),
        IS_FP8=kv_cache.dtype == FP8_DTYPE,
        FP8_LIMIT=FP8_MAX,
    )
