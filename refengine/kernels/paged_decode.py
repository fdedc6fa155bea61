"""Paged-attention decode in Triton: one new query token per sequence, K/V read through the block table.

One program handles one (sequence, KV head) and the whole GQA group of query heads that share
it, so each K/V block is read from memory once per KV head, not once per query head. It walks
the sequence's blocks with an online softmax (running max m, running sum l, unnormalised acc).

Split-K (flash-decoding): with few sequences and long contexts, B x KV-heads programs cannot
fill the GPU, so the context is cut into `num_splits` ranges of whole blocks, each program
writes its partial (m, l, acc), and `_combine` merges them exactly:
    out = sum_s exp(m_s - M) acc_s / sum_s exp(m_s - M) l_s,   M = max_s m_s.

Loads are converted to float32 before any arithmetic (also what keeps the CPU interpreter
right: its bfloat16 arithmetic is wrong). An FP8 cache is multiplied by its per-layer scale.
Cache layout and metadata are refengine's (layers/attention.py): cache [2, blocks, block_size,
kv_heads, head_dim]; block_tables [B, max_blocks] int32; seq_lens [B] int32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from refengine.quant.fp8 import FP8_DTYPE


@triton.jit
def _paged_decode_kernel(
    q_ptr, cache_ptr, block_tables_ptr, seq_lens_ptr, out_ptr, m_ptr, l_ptr,
    sm_scale, k_scale, v_scale,
    stride_qb, stride_c0, stride_c1, stride_c2, stride_c3, stride_bt,
    stride_ob, stride_os, stride_mb, stride_ms,
    num_heads, blocks_per_split,
    GROUP: tl.constexpr, GROUP_P: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_P: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, SPLIT: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    num_blocks = tl.cdiv(seq_len, BLOCK_SIZE)
    first_block = split * blocks_per_split
    last_block = tl.minimum(first_block + blocks_per_split, num_blocks)

    g = tl.arange(0, GROUP_P)
    d = tl.arange(0, HEAD_DIM_P)
    t = tl.arange(0, BLOCK_SIZE)
    g_mask = g < GROUP
    d_mask = d < HEAD_DIM
    heads = kv_head * GROUP + g
    q = tl.load(q_ptr + seq * stride_qb + heads[:, None] * HEAD_DIM + d[None, :],
                mask=g_mask[:, None] & d_mask[None, :], other=0.0).to(tl.float32)
    q = q * sm_scale

    m = tl.full([GROUP_P], float("-inf"), tl.float32)
    l = tl.zeros([GROUP_P], tl.float32)
    acc = tl.zeros([GROUP_P, HEAD_DIM_P], tl.float32)
    for blk in range(first_block, last_block):
        phys = tl.load(block_tables_ptr + seq * stride_bt + blk).to(tl.int64)
        pos = blk * BLOCK_SIZE + t
        t_mask = pos < seq_len
        base = cache_ptr + phys * stride_c1 + t[:, None] * stride_c2 + kv_head * stride_c3 + d[None, :]
        kv_mask = t_mask[:, None] & d_mask[None, :]
        k = tl.load(base, mask=kv_mask, other=0.0).to(tl.float32) * k_scale         # [BLOCK_SIZE, D]
        v = tl.load(base + stride_c0, mask=kv_mask, other=0.0).to(tl.float32) * v_scale
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2)                              # [GROUP_P, BLOCK_SIZE]
        s = tl.where(t_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        m = m_new

    out_mask = g_mask[:, None] & d_mask[None, :]
    if SPLIT:   # partial results; _combine normalises
        o_off = seq * stride_ob + split * stride_os + heads[:, None] * HEAD_DIM + d[None, :]
        tl.store(out_ptr + o_off, acc, mask=out_mask)
        ml_off = seq * stride_mb + split * stride_ms + heads
        tl.store(m_ptr + ml_off, m, mask=g_mask)
        tl.store(l_ptr + ml_off, l, mask=g_mask)
    else:
        o = acc / l[:, None]
        tl.store(out_ptr + seq * stride_ob + heads[:, None] * HEAD_DIM + d[None, :],
                 o.to(out_ptr.dtype.element_ty), mask=out_mask)


def _combine(acc: torch.Tensor, m: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    """Merge split partials: acc [B, S, H, D], m/l [B, S, H] -> [B, H, D] (empty splits have m = -inf)."""
    m_max = m.max(dim=1, keepdim=True).values
    w = torch.exp(m - m_max)                        # exp(-inf) = 0 for splits past a sequence's end
    num = (acc * w[..., None]).sum(dim=1)
    den = (l * w).sum(dim=1)
    return num / den[..., None]


def paged_decode_attention(q: torch.Tensor, kv_cache: torch.Tensor, block_tables: torch.Tensor,
                           seq_lens: torch.Tensor, num_heads: int, sm_scale: float, k_scale: float = 1.0,
                           v_scale: float = 1.0, num_splits: int = 1) -> torch.Tensor:
    """q [B, heads * head_dim] (one token per sequence) -> [B, heads * head_dim] in q's dtype."""
    _, _, block_size, kv_heads, head_dim = kv_cache.shape
    if block_size & (block_size - 1):
        raise ValueError(f"the Triton decode kernel needs a power-of-two block_size, got {block_size}")
    if kv_cache.dtype != FP8_DTYPE:   # scales apply to FP8 caches only (as quant/kv_cache.from_cache)
        k_scale = v_scale = 1.0
    b = q.shape[0]
    group = num_heads // kv_heads
    q = q.contiguous()
    block_tables = block_tables.contiguous()
    max_blocks = block_tables.shape[1]
    num_splits = max(1, min(num_splits, max_blocks))
    blocks_per_split = -(-max_blocks // num_splits)
    meta = dict(GROUP=group, GROUP_P=triton.next_power_of_2(group), HEAD_DIM=head_dim,
                HEAD_DIM_P=triton.next_power_of_2(head_dim), BLOCK_SIZE=block_size)
    c = kv_cache.stride()
    if num_splits == 1:
        out = torch.empty_like(q)
        _paged_decode_kernel[(b, kv_heads, 1)](
            q, kv_cache, block_tables, seq_lens, out, out, out, sm_scale, k_scale, v_scale,
            q.stride(0), c[0], c[1], c[2], c[3], block_tables.stride(0), out.stride(0), 0, 0, 0,
            num_heads, blocks_per_split, SPLIT=False, **meta)
        return out
    acc = torch.empty(b, num_splits, num_heads, head_dim, dtype=torch.float32, device=q.device)
    m = torch.empty(b, num_splits, num_heads, dtype=torch.float32, device=q.device)
    l = torch.empty_like(m)
    _paged_decode_kernel[(b, kv_heads, num_splits)](
        q, kv_cache, block_tables, seq_lens, acc, m, l, sm_scale, k_scale, v_scale,
        q.stride(0), c[0], c[1], c[2], c[3], block_tables.stride(0),
        acc.stride(0), acc.stride(1), m.stride(0), m.stride(1),
        num_heads, blocks_per_split, SPLIT=True, **meta)
    return _combine(acc, m, l).reshape(b, num_heads * head_dim).to(q.dtype)
