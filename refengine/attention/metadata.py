"""The batch contract of paged attention (vLLM's varlen layout) and its per-step index tensors.

KV cache, one tensor per layer: [2, num_blocks, block_size, num_kv_heads, head_dim] (K then V).
A token at position p of a sequence lives in slot block_ids[p // block_size] * block_size +
p % block_size of the flattened [num_blocks * block_size] axis. Block ids are the KV manager's;
they need not be contiguous or in order.

A step is a list of sequences in batch order, each `(start_pos, num_new_tokens, block_ids)`:
- its new tokens are at positions start_pos .. start_pos + num_new - 1 (start_pos > 0 after a
  prefix-cache hit, an earlier prefill chunk, or for decode);
- the model's flat token axis [T] is these sequences' new tokens concatenated in batch order,
  and every output (attention, hidden states) comes back in that same flat order;
- block_ids must cover the whole context, positions 0 .. start_pos + num_new - 1; the cache
  already holds positions < start_pos, and this step writes the new ones before attending.

`build_attention_metadata` turns that list into index tensors once per step; every layer reuses
them. The PyTorch path (reference.py) reads the decode slot table and the prefill slices; the
Triton kernels read `block_tables`, `seq_lens` and `query_start_loc`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class PrefillSlice:
    token_start: int  # first index in the flat token axis
    num_tokens: int  # new tokens (queries)
    start_pos: int  # position of the first new token
    context_slots: torch.Tensor  # [start_pos + num_tokens] long: cache slots of positions 0..end
    mask: torch.Tensor | None  # [num_tokens, context] bool (True = attend); None = square causal


@dataclass
class AttentionMetadata:
    num_tokens: int
    slot_mapping: torch.Tensor  # [T] long: where each new token's K/V is written
    # Per-sequence views in the layout Triton/flash kernels take (not used by the torch path).
    query_start_loc: torch.Tensor  # [S + 1] int32: cumulative new-token counts
    seq_lens: torch.Tensor  # [S] int32: context length after this step (start_pos + n)
    block_tables: torch.Tensor  # [S, max_blocks] int32, right-padded with 0
    # The batched decode: sequences with exactly one new token.
    decode_token_indices: torch.Tensor | None = None  # [B] long: their tokens in the flat axis
    decode_slots: torch.Tensor | None = None  # [B, max_ctx] long (padding points at slot 0)
    # The same context as whole blocks: [B * nb] long block ids (nb blocks cover max_ctx; padding
    # points at block 0). Gathering blocks copies a few large rows instead of many small ones.
    decode_blocks: torch.Tensor | None = None
    decode_mask: torch.Tensor | None = None  # [B, 1, 1, max_ctx] bool; None if nothing to mask
    decode_only: bool = False  # every token is a decode, in flat order (no scatter needed)
    # The decodes' rows of block_tables / seq_lens (the CPU decode kernel walks blocks in place).
    decode_block_tables: torch.Tensor | None = None  # [B, max_blocks] int32
    decode_seq_lens: torch.Tensor | None = None  # [B] int32
    prefills: list[PrefillSlice] = field(default_factory=list)
    # The prefills' rows of block_tables, and [P, 3] int64 (first token, query rows, position of the
    # first row) per prefill: what the CPU prefill kernel walks the cache with (kernels/cpu_paged_prefill.py).
    prefill_block_tables: torch.Tensor | None = None
    prefill_rows: torch.Tensor | None = None


def build_attention_metadata(
    seqs: list[tuple[int, int, list[int]]], block_size: int, device: torch.device | str = "cpu"
) -> AttentionMetadata:
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
    block_tables = torch.tensor(
        [list(ids[:nb]) + [0] * (max_nb - nb) for (_, _, ids), nb in zip(seqs, nblocks)], dtype=torch.long
    )
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
        num_tokens=num_tokens,
        slot_mapping=slot_mapping.to(device),
        query_start_loc=qsl.to(torch.int32).to(device),
        seq_lens=torch.tensor(ctx_lens, dtype=torch.int32).to(device),
        block_tables=block_tables.to(torch.int32).to(device),
    )

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
        meta.decode_blocks = block_tables[d, :nb].reshape(-1).to(device)
        # Equal contexts need no mask (SDPA's unmasked path is faster).
        meta.decode_mask = None if bool(mask.all()) else mask[:, None, None, :].to(device)
        meta.decode_only = len(decode_ids) == len(seqs)
        if meta.decode_only:
            meta.decode_block_tables, meta.decode_seq_lens = meta.block_tables, meta.seq_lens
        else:
            meta.decode_block_tables = block_tables[d].to(torch.int32).to(device)
            meta.decode_seq_lens = d_ctx.to(torch.int32).to(device)

    for i, (s, n, _) in enumerate(seqs):
        if n == 1:
            continue
        ctx = ctx_lens[i]
        ctx_slots = (block_tables[i, : nblocks[i], None] * block_size + offsets).reshape(-1)[:ctx]
        causal: torch.Tensor | None = None
        if s > 0:  # query j (position s + j) sees keys 0 .. s + j: causal, shifted by s
            causal = (torch.arange(ctx)[None, :] <= (s + torch.arange(n))[:, None]).to(device)
        meta.prefills.append(PrefillSlice(int(qsl[i]), n, s, ctx_slots.to(device), causal))
    prefill_ids = [i for i, n in enumerate(counts) if n > 1]
    if prefill_ids:
        meta.prefill_block_tables = block_tables[prefill_ids].to(torch.int32).to(device)
        meta.prefill_rows = torch.tensor([[int(qsl[i]), counts[i], starts[i]] for i in prefill_ids]).to(device)
    return meta
