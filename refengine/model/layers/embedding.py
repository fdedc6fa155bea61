"""Vocab-parallel token embedding and LM head (world size 1 today, sharded by vocab for TP).

Each rank owns a contiguous slice [vocab_start, vocab_end) of the vocabulary. The embedding looks
up the ids that fall in its slice, writes zeros for the others, and the TP all-reduce sums the
ranks' partial results into the full embedding. The LM head computes logits for its slice and
the ranks' slices are all-gathered. The per-rank slice is ceil(vocab / tp_size) rows; the last
rank's padding rows are zero and their logits are trimmed off.

Tied embeddings (tie_word_embeddings): the LM head reuses the embedding's weight Parameter, so
it is loaded once (checkpoints with tied weights have no `lm_head.weight`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from refengine.model.layers import cpu_gemm
from refengine.model.layers.weight_utils import attach_weight_loader, copy_weight
from refengine.parallel.tp_ops import tp_all_gather, tp_all_reduce


class VocabParallelEmbedding(nn.Module):
    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        *,
        tp_rank: int = 0,
        tp_size: int = 1,
        params_dtype: torch.dtype | None = None,
    ):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.num_embeddings_per_partition = -(-num_embeddings // tp_size)
        self.vocab_start = tp_rank * self.num_embeddings_per_partition
        self.vocab_end = min(self.vocab_start + self.num_embeddings_per_partition, num_embeddings)
        self.weight = nn.Parameter(
            torch.empty(
                self.num_embeddings_per_partition, embedding_dim, dtype=params_dtype or torch.get_default_dtype()
            ),
            requires_grad=False,
        )
        attach_weight_loader(self.weight, self.weight_loader)

    def weight_loader(self, param: nn.Parameter, loaded_weight: torch.Tensor, shard_id=None) -> None:
        n = self.vocab_end - self.vocab_start
        if loaded_weight.shape[0] != self.num_embeddings:
            copy_weight(param.data, loaded_weight)  # raises the shape-mismatch message
        copy_weight(param.data[:n], loaded_weight.narrow(0, self.vocab_start, n))
        param.data[n:].zero_()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return F.embedding(input_ids, self.weight)
        # Ids outside this rank's slice look up row 0 and are zeroed; the all-reduce fills them in.
        outside = (input_ids < self.vocab_start) | (input_ids >= self.vocab_end)
        local_ids = (input_ids - self.vocab_start).masked_fill(outside, 0)
        out = F.embedding(local_ids, self.weight).masked_fill(outside.unsqueeze(-1), 0)
        return tp_all_reduce(out, self.tp_size)


class ParallelLMHead(VocabParallelEmbedding):
    """hidden [N, H] -> logits [N, vocab]; its weight is vocab-sharded like the embedding's."""

    def tie_to(self, embedding: VocabParallelEmbedding) -> None:
        """Share the embedding's weight (tie_word_embeddings)."""
        self.weight = embedding.weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "packed_weight"):
            self.packed_weight = cpu_gemm.PackedWeight()  # rebuilt if tie_to swaps the weight
        logits = cpu_gemm.linear(hidden, self.weight, None, self.packed_weight)
        logits = tp_all_gather(logits, self.tp_size, dim=-1)
        return logits[..., : self.num_embeddings]
