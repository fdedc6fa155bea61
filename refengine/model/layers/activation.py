"""SiluAndMul: the SwiGLU gate applied to the fused gate_up projection.

The MLP computes [gate | up] in one matmul (MergedColumnParallelLinear); this splits the last
dim in half and returns silu(gate) * up. Under TP each rank holds matching halves of gate and up,
so the split stays local.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up
