"""Copying a checkpoint tensor into a parameter (or a shard of one), with the shape checked.

Every `weight_loader` (linear, embedding, MoE experts) and the model loader copy through
`copy_weight`, so a config.json that does not match the weights fails with one clear message.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from refengine.errors import RefEngineError

# A parameter's loader: (param, the checkpoint's tensor, shard id or None) -> None. The model
# loader finds it on the parameter under this name (vLLM's convention), else copies whole.
WEIGHT_LOADER = "weight_loader"
WeightLoader = Callable[..., None]


def attach_weight_loader(param: torch.nn.Parameter, loader: WeightLoader) -> None:
    """Give `param` the loader that narrows a checkpoint tensor to it (its TP shard, its slot)."""
    setattr(param, WEIGHT_LOADER, loader)  # a dynamic attribute: torch's Parameter declares none


def copy_weight(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst.copy_(src) (casting to dst's dtype) after checking that the shapes agree."""
    if dst.shape != src.shape:
        raise RefEngineError(
            f"checkpoint tensor has shape {tuple(src.shape)}, expected {tuple(dst.shape)}; "
            "does config.json match the weights?"
        )
    dst.copy_(src)
