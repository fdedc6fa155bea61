"""y = x @ (w8 * scale)^T + b: the three ways an FP8 linear layer is computed, and which one runs.

- W8A8 (GPU with FP8 tensor cores, sm89+, per-channel or per-tensor weight scales): x is
  quantized per token on the fly and `torch._scaled_mm` multiplies FP8 by FP8, applying both
  scales in its epilogue. Fastest, and the only path where the matmul itself is FP8.
- weight-only, dequantize per call (other GPUs, block scales): the weight is expanded to the
  compute dtype just before the matmul (the Triton kernel on GPU, PyTorch otherwise); weights
  stay FP8 in memory, which is the point on a GPU.
- weight-only, cached (CPU): the dequantized weight is kept next to the FP8 one. Measured on
  this 2-core CPU (tiny's 2816x1024 projection): F.linear in float32 takes 0.2-1 ms at decode,
  while dequantizing first takes 11-30 ms (the float8 -> float32 cast runs at ~4 ns/element;
  lookup tables are no faster), so per-call dequantization would make CPU decode 10-50x slower.
  The cache keeps FP8's numerics exactly (same values) at float32's speed; it gives no memory
  saving, and memory accounting reports it separately.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from refengine.numerics.fp8 import BLOCK, dequantize, quantize_per_token, scale_kind


def w8a8_supported(device: torch.device) -> bool:
    """FP8 tensor-core GEMMs: CUDA compute capability 8.9 (Ada) or newer, and torch._scaled_mm."""
    if device.type != "cuda" or not hasattr(torch, "_scaled_mm"):
        return False
    return torch.cuda.get_device_capability(device) >= (8, 9)


def w8a8_linear(x: torch.Tensor, w8: torch.Tensor, w_scale: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """FP8 x FP8 GEMM with dynamic per-token activation scales and per-channel weight scales."""
    shape = x.shape
    x2 = x.reshape(-1, shape[-1])
    x8, x_scale = quantize_per_token(x2)
    out_features = w8.shape[0]
    w_scale_row = w_scale.float().reshape(1, -1)
    if w_scale_row.numel() == 1:
        w_scale_row = w_scale_row.expand(1, out_features)
    # _scaled_mm wants A row-major and B column-major: w8 is [out, in] contiguous, so w8.t() is.
    # Row-wise scales need a bfloat16 output; the bias is added after, in the caller's dtype.
    y = torch._scaled_mm(x8, w8.t(), scale_a=x_scale, scale_b=w_scale_row.contiguous(), out_dtype=torch.bfloat16).to(
        x.dtype
    )
    if bias is not None:
        y = y + bias
    return y.reshape(*shape[:-1], out_features)


def _can_w8a8(layer, x: torch.Tensor) -> bool:
    w8 = layer.weight
    # _scaled_mm needs both GEMM dims divisible by 16 and a scale kind its epilogue applies.
    return (
        getattr(layer, "fp8_use_w8a8", False)
        and x.is_cuda
        and w8.shape[0] % 16 == 0
        and w8.shape[1] % 16 == 0
        and scale_kind(layer.weight_scale, tuple(w8.shape)) != "block"
    )


def dequantized_weight(layer, dtype: torch.dtype) -> torch.Tensor:
    """The weight in the compute dtype: the cached copy, the Triton kernel on GPU, or PyTorch."""
    cached = getattr(layer, "fp8_dequant_cache", None)
    if cached is not None:
        return cached
    w8, scale, block = layer.weight, layer.weight_scale, getattr(layer, "fp8_block", BLOCK)
    if w8.is_cuda:
        from refengine.kernels.dispatch import fp8_dequantize

        w = fp8_dequantize(w8, scale, dtype, block)
    else:
        w = dequantize(w8, scale, dtype, block)
    if getattr(layer, "fp8_cache_dequantized", False):
        layer.fp8_dequant_cache = w
    return w


def fp8_linear(layer, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The FP8 layer's forward; `layer` holds `weight` (float8_e4m3fn) and `weight_scale`."""
    if _can_w8a8(layer, x):
        return w8a8_linear(x, layer.weight, layer.weight_scale, bias)
    return F.linear(x, dequantized_weight(layer, x.dtype), bias)


def drop_dequant_cache(layer) -> None:
    """Forget the cached weight (after the FP8 weight or its scale changed)."""
    if getattr(layer, "fp8_dequant_cache", None) is not None:
        layer.fp8_dequant_cache = None
