"""SiluAndMul: the SwiGLU gate applied to the fused gate_up projection.

The MLP computes [gate | up] in one matmul (MergedColumnParallelLinear); this splits the last
dim in half and returns silu(gate) * up. Under TP each rank holds matching halves of gate and up,
so the split stays local. On CPU, float32 and bfloat16 go through one C++ pass
(kernels/cpu_layer_ops.py) with the same rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from refengine.kernels import cpu_layer_ops


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if cpu_layer_ops.applies(x):
            return cpu_layer_ops.silu_and_mul(x)
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up
