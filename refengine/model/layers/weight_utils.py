"""Copying a checkpoint tensor into a parameter (or a shard of one), with the shape checked.

Every `weight_loader` (linear, embedding, MoE experts) and the model loader copy through
`copy_weight`, so a config.json that does not match the weights fails with one clear message.
"""

from __future__ import annotations

import torch

from refengine.errors import RefEngineError


def copy_weight(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst.copy_(src) (casting to dst's dtype) after checking that the shapes agree."""
    if dst.shape != src.shape:
        raise RefEngineError(f"checkpoint tensor has shape {tuple(src.shape)}, expected {tuple(dst.shape)}; "
                             "does config.json match the weights?")
    dst.copy_(src)
