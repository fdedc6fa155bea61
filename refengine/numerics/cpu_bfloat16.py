"""Whether this CPU computes bfloat16 natively, and so which dtypes CPU paths keep: one rule for all.

A leaf (torch only): the packed linears (model/layers/cpu_gemm.py) and CPU attention
(attention/reference.py) both choose by `cpu_keeps`, and neither may import the device setup, which imports them.
"""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=None)
def cpu_computes_bfloat16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX-512 BF16 or AMX, as oneDNN sees it). There
    bfloat16 matmuls and attention run faster than float32; elsewhere each bfloat16 op converts to
    float32 and back, and is slower than float32 itself."""
    probe = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return bool(probe is not None and torch.backends.mkldnn.is_available() and probe())
    except RuntimeError:
        return False


def cpu_keeps(dtype: torch.dtype) -> bool:
    """Whether a CPU path computes in `dtype` itself: float32 always, bfloat16 where the CPU computes
    it natively; anything else goes through float32 (or the plain torch op)."""
    return dtype == torch.float32 or (dtype == torch.bfloat16 and cpu_computes_bfloat16())
