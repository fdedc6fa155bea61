"""Mixture-of-experts block (Mixtral style): a float32 router, top-k experts, an optional capacity factor.

Routing (as transformers' Mixtral): softmax of the router logits in float32, the top-k experts,
their weights renormalised to sum to 1. Each expert is a SwiGLU MLP; a token's output is the
weighted sum of its experts' outputs.

Dropless by default (factor 0): every assignment is computed, as vLLM, SGLang and transformers do
at inference, so a request's output never depends on what else is in its batch. The capacity
factor stays as an explicit option that shows the training-time mechanism and its overflow
metrics: an expert then takes at most C = ceil(factor x tokens x top_k / experts) of the step's
(token, expert) assignments; the rest overflow, are dropped (the token keeps its other experts),
and are counted. Which ones overflow is decided in one global order (token, then rank of the
choice), the same at every world size, so a parallel layout gives the same result as one process.

Three placements of the experts:
- one process, or TP without EP: every rank holds every expert, each expert's intermediate
  dimension split over the TP ranks (like the dense MLP), one all-reduce after the down projection.
- EP, dispatch "all_to_all": rank r holds experts [r E/n, (r+1) E/n) whole. The hidden states
  are replicated over the group after TP attention, so rank r takes a contiguous slice of the
  tokens (as a data-parallel attention rank would), routes it, and sends each kept assignment's
  hidden row to the expert's rank with all_to_all_single; the owners run their experts and send
  the rows back (a second all_to_all_single); each rank combines its slice, and an all-gather
  rebuilds the replicated hidden states for the next layer.
- EP, dispatch "allgather" (backends without all-to-all): the tokens are already everywhere, so
  each rank applies its own experts to every token assigned to them and an all-reduce combines.

Per-expert load (assignments routed, before dropping) and overflow are counted per layer;
`MixtralForCausalLM.moe_stats` sums them for the engine's metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from refengine.model.layers.weight_utils import attach_weight_loader, copy_weight
from refengine.parallel.tp_ops import tp_all_reduce, tp_group


@dataclass(frozen=True)
class MoEParallel:
    expert_parallel: bool = False
    capacity_factor: float = 0.0  # dropless, as vLLM, SGLang and transformers infer
    dispatch: str = "auto"  # all_to_all | allgather | auto


def _dist():
    import torch.distributed as dist

    return dist


class StackedWeight(nn.Module):
    """One stacked expert weight as a module of its own, so its parameter is named `<name>.weight`."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)


class FusedExperts(nn.Module):
    """The local experts' weights, stacked: w13 [E_local, 2 I_shard, H] (gate; up), w2 [E_local, H, I_shard].

    Checkpoint tensors `experts.<e>.w1/w3/w2` arrive one at a time (shard ids (e, 0|1|2)); a rank
    keeps the experts it owns and, without EP, its TP slice of each."""

    def __init__(
        self, num_experts: int, hidden: int, intermediate: int, tp_rank: int, tp_size: int, ep: bool, dtype: torch.dtype
    ):
        super().__init__()
        self.tp_rank, self.tp_size, self.ep = tp_rank, tp_size, ep
        self.num_local = num_experts // tp_size if ep else num_experts
        self.first_expert = tp_rank * self.num_local if ep else 0
        self.inter = intermediate if ep else intermediate // tp_size
        self.w13 = StackedWeight(torch.empty(self.num_local, 2 * self.inter, hidden, dtype=dtype))
        attach_weight_loader(self.w13.weight, self.weight_loader)
        self.w2 = StackedWeight(torch.empty(self.num_local, hidden, self.inter, dtype=dtype))
        attach_weight_loader(self.w2.weight, self.weight_loader)

    def weight_loader(self, param, loaded, shard_id) -> None:
        expert, which = shard_id
        local = expert - self.first_expert
        if not 0 <= local < self.num_local:
            return  # another rank's expert
        n = self.inter
        shard_rank = 0 if self.ep else self.tp_rank
        if which == 2:  # w2 (down): split its input dim
            copy_weight(param.data[local], loaded.narrow(1, shard_rank * n, n))
        else:  # w1 (gate) -> rows [0, n), w3 (up) -> rows [n, 2n)
            copy_weight(param.data[local, which * n : (which + 1) * n], loaded.narrow(0, shard_rank * n, n))

    def expert(self, local: int, x: torch.Tensor) -> torch.Tensor:
        gate, up = F.linear(x, self.w13.weight[local]).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, self.w2.weight[local])


class MoE(nn.Module):
    def __init__(
        self,
        hidden: int,
        intermediate: int,
        num_experts: int,
        top_k: int,
        tp_rank: int = 0,
        tp_size: int = 1,
        parallel: MoEParallel | None = None,
    ):
        super().__init__()
        self.parallel = parallel = parallel or MoEParallel()
        self.num_experts, self.top_k, self.tp_size = num_experts, top_k, tp_size
        self.ep = parallel.expert_parallel and tp_size > 1
        # The router stays float32 whatever the model dtype (a bf16 router flips near-tied top-k choices).
        self.gate = nn.Linear(hidden, num_experts, bias=False, dtype=torch.float32)
        self.experts = FusedExperts(
            num_experts, hidden, intermediate, tp_rank, tp_size, self.ep, torch.get_default_dtype()
        )
        self.expert_tokens = torch.zeros(num_experts, dtype=torch.long, device="cpu")  # host-side counters
        self.overflow = 0

    # ----- routing ------------------------------------------------------------------------------
    def route(self, x: torch.Tensor):
        """x [T, H] -> (expert ids [T, k], weights [T, k] float32)."""
        logits = F.linear(x.float(), self.gate.weight.float())
        weights, ids = torch.topk(torch.softmax(logits, dim=-1), self.top_k, dim=-1)
        return ids, weights / weights.sum(dim=-1, keepdim=True)

    def capacity(self, num_tokens: int) -> int | None:
        f = self.parallel.capacity_factor
        return math.ceil(f * num_tokens * self.top_k / self.num_experts) if f > 0 else None

    def keep_mask(self, ids: torch.Tensor, offsets: torch.Tensor, cap: int | None) -> torch.Tensor:
        """[T*k] bool: assignment kept; `offsets[e]` = assignments to e earlier in the global order."""
        flat = ids.reshape(-1)
        if cap is None:
            return torch.ones_like(flat, dtype=torch.bool)
        one_hot = F.one_hot(flat, self.num_experts)
        position = (one_hot.cumsum(0) * one_hot).sum(-1) - 1 + offsets[flat]
        return position < cap

    def count_assignments(self, counts: torch.Tensor, kept: int, total: int) -> None:
        """Add one step's per-expert routed assignments and its overflow (total - kept) to the counters."""
        self.expert_tokens += counts.cpu()
        self.overflow += total - kept

    # ----- compute ------------------------------------------------------------------------------
    def _apply_local(self, x, flat_ids, flat_w, token_of, keep) -> torch.Tensor:
        """Sum over kept assignments to this rank's experts of weight x expert(x[token])."""
        out = torch.zeros_like(x)
        first, n = self.experts.first_expert, self.experts.num_local
        for local in range(n):
            sel = (keep & (flat_ids == first + local)).nonzero().squeeze(-1)
            if sel.numel():
                tok = token_of[sel]
                y = self.experts.expert(local, x[tok]) * flat_w[sel].unsqueeze(-1).to(x.dtype)
                out.index_add_(0, tok, y)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ep and self._dispatch() == "all_to_all":
            return self._forward_all_to_all(x)
        num_tokens = x.shape[0]
        ids, w = self.route(x)
        flat_ids = ids.reshape(-1)
        keep = self.keep_mask(
            ids, torch.zeros(self.num_experts, dtype=torch.long, device=x.device), self.capacity(num_tokens)
        )
        self.count_assignments(torch.bincount(flat_ids, minlength=self.num_experts), int(keep.sum()), keep.numel())
        token_of = torch.arange(num_tokens, device=x.device).repeat_interleave(self.top_k)
        out = self._apply_local(x, flat_ids, w.reshape(-1), token_of, keep)
        # TP-sharded experts give partial sums; EP (allgather) gives each rank its experts' share.
        return tp_all_reduce(out, self.tp_size)

    def _dispatch(self) -> str:
        d = self.parallel.dispatch
        if d != "auto":
            return d
        return "all_to_all" if _dist().get_backend(tp_group()) in ("gloo", "nccl") else "allgather"

    def _forward_all_to_all(self, x: torch.Tensor) -> torch.Tensor:
        from refengine.model.layers.moe_dispatch import all_to_all_moe

        return all_to_all_moe(self, x, tp_group())
