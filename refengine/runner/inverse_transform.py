"""Inverse-transform sampling of a batch of categorical distributions, one uniform number per row.

For each row of `probs` (non-negative, any positive total) and its u in [0, 1), the token is the
first whose cumulative mass exceeds u x total. Summing a whole row in float64 (a CDF of a 128k
vocabulary for each of 64 rows: 8M doubles) costs more than the softmax before it, so the search is
done in two levels: the mass of each block of BLOCK tokens (a reduction in the input's precision),
a float64 CDF over the blocks to find the block holding u x total, then a float64 CDF within that
one block. Exact up to the rounding of the sums; a draw that rounding pushes past the last token
with mass is taken back to it, so a zero-probability token is never drawn.
"""

from __future__ import annotations

import torch

BLOCK = 1024


def _last_positive(mass: torch.Tensor) -> torch.Tensor:
    """Per row, the index of the last entry > 0 (0 where none is)."""
    ids = torch.arange(mass.shape[-1], device=mass.device)
    return torch.where(mass > 0, ids, 0).amax(dim=-1)


def draw(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """probs [R, V] (rows with a finite positive total), u [R] float64 in [0, 1) -> tokens [R] (int64)."""
    rows, vocab = probs.shape
    full = vocab // BLOCK
    # Each block's mass in the input's precision (a float32 sum of 1,024 terms is good to ~1e-7 of
    # itself; widening every entry to float64 first cost more than the softmax), then float64.
    sums = [probs[:, : full * BLOCK].reshape(rows, full, BLOCK).sum(dim=-1)] if full else []
    if vocab % BLOCK:
        sums.append(probs[:, full * BLOCK :].sum(dim=-1, keepdim=True))
    block_mass = torch.cat(sums, dim=1).double()  # [R, blocks]
    block_cdf = block_mass.cumsum(dim=-1)
    x = u.to(block_cdf.dtype) * block_cdf[:, -1]
    block = torch.searchsorted(block_cdf, x[:, None], right=True)[:, 0]
    block = torch.minimum(block, _last_positive(block_mass))
    before = torch.where(block > 0, block_cdf.gather(1, (block - 1).clamp(min=0)[:, None])[:, 0], 0.0)
    idx = block[:, None] * BLOCK + torch.arange(BLOCK, device=probs.device)[None, :]  # [R, BLOCK]
    inside = torch.where(idx < vocab, probs.gather(1, idx.clamp(max=vocab - 1)), 0.0)
    inner_cdf = inside.cumsum(dim=-1, dtype=torch.float64)
    k = torch.searchsorted(inner_cdf, (x - before)[:, None], right=True)[:, 0]
    k = torch.minimum(k, _last_positive(inside))
    return block * BLOCK + k
