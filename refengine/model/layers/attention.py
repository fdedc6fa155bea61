"""Paged attention in plain PyTorch: the CPU path, and the oracle the Triton kernels are tested against.

KV cache, one tensor per layer: [2, num_blocks, block_size, num_kv_heads, head_dim] (K then V).
A token at position p of a sequence lives in slot block_ids[p // block_size] * block_size +
p % block_size of the flattened [num_blocks * block_size] axis. Block ids are the KV manager's;
they need not be contiguous or in order.

The batch contract (vLLM's varlen layout). A step is a list of sequences in batch order, each
`(start_pos, num_new_tokens, block_ids)`:
- its new tokens are at positions start_pos .. start_pos + num_new - 1 (start_pos > 0 after a
  prefix-cache hit, an earlier prefill chunk, or for decode);
- the model's flat token axis [T] is these sequences' new tokens concatenated in batch order,
  and every output (attention, hidden states) comes back in that same flat order;
- block_ids must cover the whole context, positions 0 .. start_pos + num_new - 1; the cache
  already holds positions < start_pos, and this step writes the new ones before attending.

`build_attention_metadata` turns that list into index tensors once per step; every layer reuses
them. Decodes (num_new == 1) are batched into one SDPA call over K/V gathered through a padded
[B, max_context] slot table with a length mask. Prefills (num_new > 1) run one SDPA call each,
causal with the query offset by start_pos. Math is float32 on CPU (no fast bf16 there).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from refengine.quant.kv_cache import from_cache, is_fp8, kv_cache_bytes_per_token, to_cache


@dataclass
class PrefillSlice:
    token_start: int             # first index in the flat token axis
    num_tokens: int              # new tokens (queries)
    start_pos: int               # position of the first new token
    context_slots: torch.Tensor  # [start_pos + num_tokens] long: cache slots of positions 0..end
    mask: torch.Tensor | None    # [num_tokens, context] bool (True = attend); None = square causal


@dataclass
class AttentionMetadata:
    num_tokens: int
    slot_mapping: torch.Tensor     # [T] long: where each new token's K/V is written
    # Per-sequence views in the layout Triton/flash kernels take (not used by the torch path).
    query_start_loc: torch.Tensor  # [S + 1] int32: cumulative new-token counts
    seq_lens: torch.Tensor         # [S] int32: context length after this step (start_pos + n)
    block_tables: torch.Tensor     # [S, max_blocks] int32, right-padded with 0
    # The batched decode: sequences with exactly one new token.
    decode_token_indices: torch.Tensor | None = None  # [B] long: their tokens in the flat axis
    decode_slots: torch.Tensor | None = None          # [B, max_ctx] long (padding points at slot 0)
    decode_mask: torch.Tensor | None = None           # [B, 1, 1, max_ctx] bool; None if nothing to mask
    decode_only: bool = False  # every token is a decode, in flat order (no scatter needed)
    prefills: list[PrefillSlice] = field(default_factory=list)


def build_attention_metadata(seqs: list[tuple[int, int, list[int]]], block_size: int,
                             device: torch.device | str = "cpu") -> AttentionMetadata:
    """Index tensors for one step; `seqs` is [(start_pos, num_new_tokens, block_ids)] in batch order."""
    if not seqs:
        raise ValueError("a step needs at least one sequence")
    starts = [s for s, _, _ in seqs]
    counts = [n for _, n, _ in seqs]
    ctx_lens = [s + n for s, n, _ in seqs]
    nblocks = [-(-c // block_size) for c in ctx_lens]
    for (s, n, ids), need in zip(seqs, nblocks):
        if n < 1 or s < 0:
            raise ValueError(f"each sequence needs start_pos >= 0 and num_new_tokens >= 1, got ({s}, {n})")
        if len(ids) < need:
            raise ValueError(f"a context of {s + n} tokens needs {need} blocks of {block_size}, got {len(ids)}")
    max_nb = max(nblocks)
    # Built on the CPU from Python lists in a handful of vectorized ops, then moved once.
    block_tables = torch.tensor([list(ids[:nb]) + [0] * (max_nb - nb) for (_, _, ids), nb in zip(seqs, nblocks)],
                                dtype=torch.long)
    offsets = torch.arange(block_size)
    counts_t, starts_t = torch.tensor(counts), torch.tensor(starts)
    qsl = torch.zeros(len(seqs) + 1, dtype=torch.long)
    qsl[1:] = torch.cumsum(counts_t, 0)
    num_tokens = int(qsl[-1])

    # slot_mapping: token t of sequence i sits at position starts[i] + (t - qsl[i]).
    seq_of_token = torch.repeat_interleave(torch.arange(len(seqs)), counts_t)
    pos = starts_t[seq_of_token] + torch.arange(num_tokens) - qsl[:-1][seq_of_token]
    slot_mapping = block_tables[seq_of_token, pos // block_size] * block_size + pos % block_size

    meta = AttentionMetadata(
        num_tokens=num_tokens, slot_mapping=slot_mapping.to(device),
        query_start_loc=qsl.to(torch.int32).to(device),
        seq_lens=torch.tensor(ctx_lens, dtype=torch.int32).to(device),
        block_tables=block_tables.to(torch.int32).to(device))

    decode_ids = [i for i, n in enumerate(counts) if n == 1]
    if decode_ids:
        d = torch.tensor(decode_ids)
        d_ctx = torch.tensor([ctx_lens[i] for i in decode_ids])
        max_ctx = int(d_ctx.max())
        nb = -(-max_ctx // block_size)
        slots = (block_tables[d, :nb, None] * block_size + offsets).reshape(len(decode_ids), -1)[:, :max_ctx]
        mask = torch.arange(max_ctx)[None, :] < d_ctx[:, None]
        meta.decode_token_indices = qsl[d].to(device)
        meta.decode_slots = slots.contiguous().to(device)
        # Equal contexts need no mask (SDPA's unmasked path is faster).
        meta.decode_mask = None if bool(mask.all()) else mask[:, None, None, :].to(device)
        meta.decode_only = len(decode_ids) == len(seqs)

    for i, (s, n, _) in enumerate(seqs):
        if n == 1:
            continue
        ctx = ctx_lens[i]
        ctx_slots = (block_tables[i, :nblocks[i], None] * block_size + offsets).reshape(-1)[:ctx]
        mask = None
        if s > 0:  # query j (position s + j) sees keys 0 .. s + j: causal, shifted by s
            mask = torch.arange(ctx)[None, :] <= (s + torch.arange(n))[:, None]
            mask = mask.to(device)
        meta.prefills.append(PrefillSlice(int(qsl[i]), n, s, ctx_slots.to(device), mask))
    return meta


def store_kv(k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
             k_scale: float = 1.0, v_scale: float = 1.0) -> None:
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


def paged_attention(q: torch.Tensor, kv_cache: torch.Tensor, meta: AttentionMetadata, num_heads: int,
                    scale: float, k_scale: float = 1.0, v_scale: float = 1.0) -> torch.Tensor:
    """q [T, heads * head_dim] -> attention output [T, heads * head_dim], flat token order.

    K and V are gathered in the cache dtype and converted (x8 * scale for FP8) after the gather,
    so only the rows a step reads are ever dequantized."""
    _, num_blocks, block_size, kv_heads, head_dim = kv_cache.shape
    flat = kv_cache.view(2, num_blocks * block_size, kv_heads, head_dim)
    compute_dtype = torch.float32 if q.device.type == "cpu" else q.dtype
    q = q.view(-1, num_heads, head_dim).to(compute_dtype)
    gqa = kv_heads != num_heads
    out = torch.empty_like(q) if not meta.decode_only else None

    if meta.decode_slots is not None:
        b, max_ctx = meta.decode_slots.shape
        qd = q if meta.decode_only else q[meta.decode_token_indices]
        # index_select on the flat slot list is several times faster than advanced indexing with a
        # 2-D index; [B * max_ctx, KVH, D] -> view [B, KVH, max_ctx, D] (SDPA takes the strides).
        slots = meta.decode_slots.view(-1)
        kd = from_cache(flat[0].index_select(0, slots), compute_dtype, k_scale).view(b, max_ctx, kv_heads, head_dim)
        vd = from_cache(flat[1].index_select(0, slots), compute_dtype, v_scale).view(b, max_ctx, kv_heads, head_dim)
        kd, vd = kd.transpose(1, 2), vd.transpose(1, 2)
        od = F.scaled_dot_product_attention(qd.unsqueeze(2), kd, vd, attn_mask=meta.decode_mask, scale=scale,
                                            enable_gqa=gqa).squeeze(2)
        if meta.decode_only:
            out = od
        else:
            out[meta.decode_token_indices] = od

    for p in meta.prefills:
        qp = q[p.token_start:p.token_start + p.num_tokens].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
        kp = from_cache(flat[0].index_select(0, p.context_slots), compute_dtype, k_scale)
        vp = from_cache(flat[1].index_select(0, p.context_slots), compute_dtype, v_scale)
        kp, vp = kp.transpose(0, 1).unsqueeze(0), vp.transpose(0, 1).unsqueeze(0)  # [1, KVH, L, D]
        op = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=p.mask, is_causal=p.mask is None, scale=scale,
                                            enable_gqa=gqa)
        out[p.token_start:p.token_start + p.num_tokens] = op.squeeze(0).transpose(0, 1)
    return out.reshape(-1, num_heads * head_dim)


class Attention(nn.Module):
    """Stores this step's K/V into the layer's paged cache, then attends over each sequence's context.

    `k_scale` / `v_scale`: this layer's FP8 KV scales (used only when the cache is FP8; 1.0 until
    calibrated). `kv_observer`, when set, sees every K/V before it is stored (calibration).
    On a GPU the Triton kernels (refengine/kernels) take the step when they apply; this file's
    PyTorch functions are the fallback and the oracle they are tested against."""

    def __init__(self, num_heads: int, head_dim: int, scale: float, num_kv_heads: int):
        super().__init__()
        self.num_heads, self.head_dim, self.scale, self.num_kv_heads = num_heads, head_dim, scale, num_kv_heads
        self.k_scale, self.v_scale = 1.0, 1.0
        self.kv_observer = None
        self.use_kernels = True

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor,
                meta: AttentionMetadata) -> torch.Tensor:
        if self.kv_observer is not None:
            self.kv_observer(self, k, v)
        if q.is_cuda and self.use_kernels:
            from refengine.kernels.dispatch import attention_with_kernels
            out = attention_with_kernels(self, q, k, v, kv_cache, meta)
            if out is not None:
                return out
        store_kv(k, v, kv_cache, meta.slot_mapping, self.k_scale, self.v_scale)
        return paged_attention(q, kv_cache, meta, self.num_heads, self.scale, self.k_scale,
                               self.v_scale).to(q.dtype)


def kv_cache_bytes_per_block(model_config, block_size: int, dtype: torch.dtype, tp_size: int = 1) -> int:
    """Bytes one block id costs across all layers: 2 x layers x block_size x kv_heads x head_dim x itemsize
    (`dtype` is the KV cache's own dtype: 1 byte for FP8)."""
    return block_size * kv_cache_bytes_per_token(model_config, dtype, tp_size=tp_size)


def allocate_kv_caches(model_config, num_blocks: int, block_size: int, dtype: torch.dtype,
                       device: torch.device | str, tp_size: int = 1) -> list[torch.Tensor]:
    """One [2, num_blocks, block_size, kv_heads, head_dim] tensor per layer.

    Zero-filled, not empty: padded decode rows gather unused slots and a masked-out score times a
    NaN of uninitialised memory would still poison the output."""
    kv_heads = max(1, model_config.num_key_value_heads // tp_size)
    shape = (2, num_blocks, block_size, kv_heads, model_config.head_dim)
    return [torch.zeros(shape, dtype=dtype, device=device) for _ in range(model_config.num_hidden_layers)]
