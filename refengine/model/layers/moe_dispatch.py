"""Expert-parallel dispatch and combine with all_to_all_single (see moe.py for the placement).

Per layer, on each of the n ranks of the group:
1. take this rank's contiguous slice of the (replicated) tokens and route it;
2. all-gather the per-expert assignment counts [n, E]: every rank then knows how many rows it
   sends to and receives from every other rank, and where each assignment falls in the global
   order that the capacity rule uses (so no rank needs the others' routing);
3. all_to_all_single the kept assignments' hidden rows, sorted by expert, to the experts' owners;
4. the owners run their experts and all_to_all_single the rows back;
5. each rank sums its tokens' weighted expert outputs, and an all-gather (slices padded to equal
   length) rebuilds the replicated hidden states.
Rows are sorted by expert before the sum, as the one-process path loops over experts, so the
floating-point sums happen in the same order.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _slice_sizes(num_tokens: int, n: int) -> list[int]:
    base, extra = divmod(num_tokens, n)
    return [base + (1 if r < extra else 0) for r in range(n)]


def kept_counts(all_counts: torch.Tensor, cap: int | None) -> torch.Tensor:
    """[n, E] assignments each source rank keeps per expert under the global capacity rule."""
    if cap is None:
        return all_counts
    before = all_counts.cumsum(0) - all_counts  # assignments to e on earlier ranks
    return (cap - before).clamp(min=0).minimum(all_counts)


def all_to_all_moe(moe, x: torch.Tensor, group) -> torch.Tensor:
    n, rank = dist.get_world_size(group), dist.get_rank(group)
    num_experts, k, hidden = moe.num_experts, moe.top_k, x.shape[-1]
    per_rank = num_experts // n
    sizes = _slice_sizes(x.shape[0], n)
    start = sum(sizes[:rank])
    xs = x[start : start + sizes[rank]]

    ids, weights = moe.route(xs)
    flat_ids, flat_w = ids.reshape(-1), weights.reshape(-1)
    counts = torch.bincount(flat_ids, minlength=num_experts)
    gathered = [torch.empty_like(counts) for _ in range(n)]
    dist.all_gather(gathered, counts, group=group)
    all_counts = torch.stack(gathered).cpu()  # split sizes are Python ints
    cap = moe.capacity(x.shape[0])
    kept = kept_counts(all_counts, cap)
    moe.count_assignments(all_counts.sum(0), int(kept.sum()), int(all_counts.sum()))

    keep = moe.keep_mask(ids, (all_counts[:rank].sum(0)).to(x.device), cap)
    token_of = torch.arange(xs.shape[0], device=x.device).repeat_interleave(k)
    chosen = keep.nonzero().squeeze(-1)
    order = chosen[torch.argsort(flat_ids[chosen], stable=True)]
    send_x = xs[token_of[order]].contiguous()
    send_splits = [int(kept[rank, d * per_rank : (d + 1) * per_rank].sum()) for d in range(n)]
    recv_splits = [int(kept[src, rank * per_rank : (rank + 1) * per_rank].sum()) for src in range(n)]
    recv_x = x.new_empty(sum(recv_splits), hidden)
    dist.all_to_all_single(recv_x, send_x, recv_splits, send_splits, group=group)

    # Received rows: for each source rank, its rows for my experts in expert order.
    local_ids = torch.cat(
        [
            torch.full((int(kept[src, e]),), e - rank * per_rank, dtype=torch.long)
            for src in range(n)
            for e in range(rank * per_rank, (rank + 1) * per_rank)
        ]
        or [torch.empty(0, dtype=torch.long)]
    ).to(x.device)
    recv_y = torch.empty_like(recv_x)
    for local in range(per_rank):
        rows = (local_ids == local).nonzero().squeeze(-1)
        if rows.numel():
            recv_y[rows] = moe.experts.expert(local, recv_x[rows])
    back = torch.empty_like(send_x)
    dist.all_to_all_single(back, recv_y, send_splits, recv_splits, group=group)

    ys = torch.zeros_like(xs)
    ys.index_add_(0, token_of[order], back * flat_w[order].unsqueeze(-1).to(x.dtype))
    longest = max(sizes)
    padded = torch.zeros(longest, hidden, dtype=x.dtype, device=x.device)
    padded[: ys.shape[0]] = ys
    parts = [torch.empty_like(padded) for _ in range(n)]
    dist.all_gather(parts, padded, group=group)
    return torch.cat([p[:s] for p, s in zip(parts, sizes)])
