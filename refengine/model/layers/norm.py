"""RMSNorm, with the residual add fused in (the pre-norm decoder's hot pattern).

`forward(x)` normalises; `forward(x, residual)` first adds x to the residual stream and returns
(normalised sum, new residual), so each decoder layer does one add + norm instead of two passes
and never keeps a separate copy of the stream. Statistics are taken in float32 as transformers
does, then the weight multiplies in the input dtype. On CPU, float32 and bfloat16 rows go through
one C++ pass (kernels/cpu_layer_ops.py) with the same rounding.
"""

from __future__ import annotations

import torch
from torch import nn

from refengine.kernels import cpu_layer_ops


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6, params_dtype: torch.dtype | None = None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(
            torch.ones(hidden_size, dtype=params_dtype or torch.get_default_dtype()), requires_grad=False
        )

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if self._fused(x, residual):
            out, new_residual = cpu_layer_ops.add_rms_norm(x, residual, self.weight, self.eps)
            return out if residual is None else (out, new_residual)
        if residual is None:
            return self._norm(x)
        x = x + residual
        return self._norm(x), x

    def _fused(self, x: torch.Tensor, residual: torch.Tensor | None) -> bool:
        return (
            x.stride(-1) == 1
            and self.weight.dtype == x.dtype
            and (
                residual is None
                or (residual.is_contiguous() and residual.shape == x.shape and residual.dtype == x.dtype)
            )
            and cpu_layer_ops.applies(x)
        )
