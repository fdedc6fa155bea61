"""Paged attention in plain PyTorch: the CPU path, and the oracle the Triton kernels are tested against.

The cache layout and the batch contract are in metadata.py. Decodes (num_new == 1) are batched
into one SDPA call over K/V gathered through a padded [B, max_context] slot table with a length
mask. Prefills (num_new > 1) run one SDPA call each, causal with the query offset by start_pos.
On CPU the math is float32, except bfloat16 on a CPU that computes it natively (AVX-512 BF16, AMX):
there SDPA runs in bfloat16 (accumulating in float32 inside), and the gathered context is not
converted first (the conversion cost a bfloat16 decode step at 64 x 256 tokens a fifth of its
time: docs/engine.md, "bfloat16 attention on CPU").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from refengine.attention.metadata import AttentionMetadata
from refengine.numerics import cpu_bfloat16
from refengine.numerics.kv_cache import from_cache, is_fp8, to_cache


def store_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> None:
    """Write this step's K and V ([T, kv_heads * head_dim]) into their cache slots.

    An FP8 cache stores x / scale (saturated); index_copy_ has no float8 kernel, so FP8 is
    copied through a uint8 view of the same bytes."""
    _, num_blocks, block_size, kv_heads, head_dim = kv_cache.shape
    flat = kv_cache.view(2, num_blocks * block_size, kv_heads, head_dim)
    k = to_cache(k.view(-1, kv_heads, head_dim), kv_cache.dtype, k_scale)
    v = to_cache(v.view(-1, kv_heads, head_dim), kv_cache.dtype, v_scale)
    if is_fp8(kv_cache.dtype):
        flat, k, v = flat.view(torch.uint8), k.view(torch.uint8), v.view(torch.uint8)
    flat[0].index_copy_(0, slot_mapping, k)
    flat[1].index_copy_(0, slot_mapping, v)


def _cpu_keeps(dtype: torch.dtype) -> bool:
    """Whether CPU attention computes in this dtype rather than in float32."""
    return cpu_bfloat16.cpu_keeps(dtype)


def _gather_blocks(
    cache: torch.Tensor, blocks: torch.Tensor, batch: int, dtype: torch.dtype, scale: float
) -> torch.Tensor:
    """One half of the cache ([num_blocks, block_size, KVH, D]) at `blocks` ([B * nb] ids), as
    [B, nb * block_size, KVH, D] in `dtype`."""
    _, block_size, kv_heads, head_dim = cache.shape
    rows = cache.view(cache.shape[0], -1).index_select(0, blocks)
    return from_cache(rows, dtype, scale).view(batch, -1, kv_heads, head_dim)


def paged_attention(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    meta: AttentionMetadata,
    num_heads: int,
    scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
) -> torch.Tensor:
    """q [T, heads * head_dim] -> attention output [T, heads * head_dim], flat token order.

    K and V are gathered in the cache dtype and converted (x8 * scale for FP8) after the gather,
    so only the rows a step reads are ever dequantized."""
    _, num_blocks, block_size, kv_heads, head_dim = kv_cache.shape
    flat = kv_cache.view(2, num_blocks * block_size, kv_heads, head_dim)
    compute_dtype = q.dtype if q.device.type != "cpu" or _cpu_keeps(q.dtype) else torch.float32
    q = q.view(-1, num_heads, head_dim).to(compute_dtype)
    gqa = kv_heads != num_heads
    out = torch.empty_like(q) if not meta.decode_only else None

    if meta.decode_slots is not None:
        b, max_ctx = meta.decode_slots.shape
        qd = q if meta.decode_only else q[meta.decode_token_indices]
        # Whole blocks, gathered by block id (one row of block_size x KVH x D per block: index_select
        # copies few large rows, where a slot list copies one small row per token), then the padding
        # past max_ctx sliced off as a view: [B, nb * block_size, KVH, D] -> [B, KVH, max_ctx, D]
        # (SDPA takes the strides).
        assert meta.decode_blocks is not None  # built with decode_slots
        kd = _gather_blocks(kv_cache[0], meta.decode_blocks, b, compute_dtype, k_scale)[:, :max_ctx].transpose(1, 2)
        vd = _gather_blocks(kv_cache[1], meta.decode_blocks, b, compute_dtype, v_scale)[:, :max_ctx].transpose(1, 2)
        od = F.scaled_dot_product_attention(
            qd.unsqueeze(2), kd, vd, attn_mask=meta.decode_mask, scale=scale, enable_gqa=gqa
        ).squeeze(2)
        if out is None:  # decode only: the decodes are the whole batch
            out = od
        else:
            out[meta.decode_token_indices] = od
    # A decode-only batch has decodes (it took the branch above); any other has its own `out`.
    assert out is not None, "a decode-only batch without decodes"

    for p in meta.prefills:
        qp = q[p.token_start : p.token_start + p.num_tokens].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        kp = from_cache(flat[0].index_select(0, p.context_slots), compute_dtype, k_scale)
        vp = from_cache(flat[1].index_select(0, p.context_slots), compute_dtype, v_scale)
        kp, vp = kp.transpose(0, 1).unsqueeze(0), vp.transpose(0, 1).unsqueeze(0)  # [1, KVH, L, D]
        op = F.scaled_dot_product_attention(
            qp, kp, vp, attn_mask=p.mask, is_causal=p.mask is None, scale=scale, enable_gqa=gqa
        )
        out[p.token_start : p.token_start + p.num_tokens] = op.squeeze(0).transpose(0, 1)
    return out.reshape(-1, num_heads * head_dim)
