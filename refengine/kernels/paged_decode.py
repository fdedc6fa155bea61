"""Paged-attention decode in Triton: one new query token per sequence, K/V read through the block table.

One program handles one (sequence, KV head) and the whole GQA group of query heads that share
it, so each K/V block is read from memory once per KV head, not once per query head. It walks
the context in tiles of 64 tokens (several pages, gathered through the block table) with an
online softmax (running max m, running sum l, unnormalised acc); the two products are tl.dot
with the group padded to 16 rows (bf16 tensor cores for a 16-bit model on GPU, exact fp32
otherwise, which also keeps the CPU interpreter right).

Split-K (flash-decoding): with few sequences and long contexts, B x KV-heads programs cannot
fill the GPU, so the context is cut into `num_splits` ranges of whole tiles, each program
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

from refengine.numerics.fp8 import FP8_DTYPE

TILE = 64  # tokens per inner-loop iteration (several pages); tl.dot needs every dim >= 16


@triton.jit
def _paged_decode_kernel(
    q_ptr,
    cache_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    out_ptr,
    m_ptr,
    l_ptr,
    sm_scale,
    k_scale,
    v_scale,
    stride_qb,
    stride_c0,
    stride_c1,
    stride_c2,
    stride_c3,
    stride_bt,
    stride_ob,
    stride_os,
    stride_mb,
    stride_ms,
    tokens_per_split,
    GROUP: tl.constexpr,
    GROUP_P: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_P: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE: tl.constexpr,
    SPLIT: tl.constexpr,
    LOW_PRECISION_DOT: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    first_tok = split * tokens_per_split
    last_tok = tl.minimum(first_tok + tokens_per_split, seq_len)

    g = tl.arange(0, GROUP_P)
    d = tl.arange(0, HEAD_DIM_P)
    t = tl.arange(0, TILE)
    g_mask = g < GROUP
    d_mask = d < HEAD_DIM
    heads = kv_head * GROUP + g
    q = tl.load(
        q_ptr + seq * stride_qb + heads[:, None] * HEAD_DIM + d[None, :],
        mask=g_mask[:, None] & d_mask[None, :],
        other=0.0,
    ).to(tl.float32)
    q = q * sm_scale
    if LOW_PRECISION_DOT:  # bf16 tensor cores, fp32 accumulation (GPU with a 16-bit model dtype)
        q = q.to(tl.bfloat16)

    m = tl.full([GROUP_P], float("-inf"), tl.float32)
    l = tl.zeros([GROUP_P], tl.float32)
    acc = tl.zeros([GROUP_P, HEAD_DIM_P], tl.float32)
    # A tile of TILE tokens spans TILE / BLOCK_SIZE pages: their ids are gathered from the block
    # table in one vector load, so each iteration has many independent loads in flight.
    for start in range(first_tok, last_tok, TILE):
        tok = start + t
        t_mask = tok < last_tok
        page = tl.load(block_tables_ptr + seq * stride_bt + tok // BLOCK_SIZE, mask=t_mask, other=0).to(tl.int64)
        row = page * stride_c1 + (tok % BLOCK_SIZE) * stride_c2 + kv_head * stride_c3
        kv_mask = t_mask[:, None] & d_mask[None, :]
        k = tl.load(cache_ptr + row[:, None] + d[None, :], mask=kv_mask, other=0.0).to(tl.float32) * k_scale
        v = tl.load(cache_ptr + stride_c0 + row[:, None] + d[None, :], mask=kv_mask, other=0.0).to(tl.float32)
        v = v * v_scale
        if LOW_PRECISION_DOT:
            s = tl.dot(q, tl.trans(k.to(tl.bfloat16)))  # [GROUP_P, TILE]
        else:
            s = tl.dot(q, tl.trans(k), input_precision="ieee")
        s = tl.where(t_mask[None, :], s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        if LOW_PRECISION_DOT:
            pv = tl.dot(p.to(tl.bfloat16), v.to(tl.bfloat16))
        else:
            pv = tl.dot(p, v, input_precision="ieee")
        acc = acc * alpha[:, None] + pv
        m = m_new

    out_mask = g_mask[:, None] & d_mask[None, :]
    if SPLIT:  # partial results; _combine normalises
        o_off = seq * stride_ob + split * stride_os + heads[:, None] * HEAD_DIM + d[None, :]
        tl.store(out_ptr + o_off, acc, mask=out_mask)
        ml_off = seq * stride_mb + split * stride_ms + heads
        tl.store(m_ptr + ml_off, m, mask=g_mask)
        tl.store(l_ptr + ml_off, l, mask=g_mask)
    else:
        o = acc / l[:, None]
        tl.store(
            out_ptr + seq * stride_ob + heads[:, None] * HEAD_DIM + d[None, :],
            o.to(out_ptr.dtype.element_ty),
            mask=out_mask,
        )


def _combine(acc: torch.Tensor, m: torch.Tensor, l: torch.Tensor) -> torch.Tensor:
    """Merge split partials: acc [B, S, H, D], m/l [B, S, H] -> [B, H, D] (empty splits have m = -inf)."""
    m_max = m.max(dim=1, keepdim=True).values
    w = torch.exp(m - m_max)  # exp(-inf) = 0 for splits past a sequence's end
    num = (acc * w[..., None]).sum(dim=1)
    den = (l * w).sum(dim=1)
    return num / den[..., None]


def paged_decode_attention(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    num_heads: int,
    sm_scale: float,
    k_scale: float = 1.0,
    v_scale: float = 1.0,
    num_splits: int = 1,
) -> torch.Tensor:
    """q [B, heads * head_dim] (one token per sequence) -> [B, heads * head_dim] in q's dtype."""
    _, _, block_size, kv_heads, head_dim = kv_cache.shape
    if block_size & (block_size - 1):
        raise ValueError(f"the Triton decode kernel needs a power-of-two block_size, got {block_size}")
    if kv_cache.dtype != FP8_DTYPE:  # scales apply to FP8 caches only (as numerics/kv_cache.from_cache)
        k_scale = v_scale = 1.0
    b = q.shape[0]
    group = num_heads // kv_heads
    q = q.contiguous()
    block_tables = block_tables.contiguous()
    max_tokens = block_tables.shape[1] * block_size
    tile = max(TILE, block_size)
    num_splits = max(1, min(num_splits, -(-max_tokens // tile)))
    tokens_per_split = -(-max_tokens // (num_splits * tile)) * tile  # whole tiles per split
    meta = dict(
        GROUP=group,
        GROUP_P=max(16, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim,
        HEAD_DIM_P=max(16, triton.next_power_of_2(head_dim)),
        BLOCK_SIZE=block_size,
        TILE=tile,
        LOW_PRECISION_DOT=q.is_cuda and q.dtype in (torch.bfloat16, torch.float16),
    )
    c = kv_cache.stride()
    if num_splits == 1:
        out = torch.empty_like(q)
        _paged_decode_kernel[(b, kv_heads, 1)](
            q,
            kv_cache,
            block_tables,
            seq_lens,
            out,
            out,
            out,
            sm_scale,
            k_scale,
            v_scale,
            q.stride(0),
            c[0],
            c[1],
            c[2],
            c[3],
            block_tables.stride(0),
            out.stride(0),
            0,
            0,
            0,
            tokens_per_split,
            SPLIT=False,
            **meta,
        )
        return out
    acc = torch.empty(b, num_splits, num_heads, head_dim, dtype=torch.float32, device=q.device)
    m = torch.empty(b, num_splits, num_heads, dtype=torch.float32, device=q.device)
    l = torch.empty_like(m)
    _paged_decode_kernel[(b, kv_heads, num_splits)](
        q,
        kv_cache,
        block_tables,
        seq_lens,
        acc,
        m,
        l,
        sm_scale,
        k_scale,
        v_scale,
        q.stride(0),
        c[0],
        c[1],
        c[2],
        c[3],
        block_tables.stride(0),
        acc.stride(0),
        acc.stride(1),
        m.stride(0),
        m.stride(1),
        tokens_per_split,
        SPLIT=True,
        **meta,
    )
    return _combine(acc, m, l).reshape(b, num_heads * head_dim).to(q.dtype)
