"""FP8 KV cache: the dtype choice, the byte size the block budget uses, and the store/load rule.

`--kv-cache-dtype fp8` stores K and V as E4M3 with one scale per layer for K and one for V:
store `saturate(x / scale)`, load `x8 * scale`. The default scale 1.0 suits activations that
stay well inside +-448 (K/V of normal Llama checkpoints do); `calculate_kv_scales` measures
amax on a few prompts and sets scale = amax / 448 (quant/kv_calibration.py).

Each element costs 1 byte instead of the model dtype's 2 (bfloat16/float16: 2x the blocks in
the same budget) or 4 (float32, the CPU default here: 4x).
"""

from __future__ import annotations

import torch

from refengine.errors import RefEngineError
from refengine.numerics.fp8 import FP8_DTYPE, saturate_to_fp8

KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3")


def resolve_kv_cache_dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    """'auto' -> the model dtype; 'fp8' / 'fp8_e4m3' -> float8_e4m3fn."""
    if name == "auto":
        return model_dtype
    if name in ("fp8", "fp8_e4m3"):
        return FP8_DTYPE
    raise RefEngineError(
        f"kv_cache_dtype must be one of {KV_CACHE_DTYPES}, got {name!r} "
        "(fp8_e5m2 is not supported: E4M3 with per-layer scales is more precise)"
    )


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype == FP8_DTYPE


def kv_cache_bytes_per_token(
    model_config, kv_cache_dtype: str | torch.dtype = "auto", model_dtype: torch.dtype = torch.float32, tp_size: int = 1
) -> int:
    """KV bytes one token costs on one rank: 2 x layers x kv_heads x head_dim x element size.

    The single source the engine's block budget uses; the memory model can call or mirror it."""
    dtype = resolve_kv_cache_dtype(kv_cache_dtype, model_dtype) if isinstance(kv_cache_dtype, str) else kv_cache_dtype
    kv_heads = max(1, model_config.num_key_value_heads // tp_size)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    return 2 * model_config.num_hidden_layers * kv_heads * model_config.head_dim * itemsize


def to_cache(x: torch.Tensor, cache_dtype: torch.dtype, scale: float) -> torch.Tensor:
    """A K or V tensor as it is stored: scaled and saturated for FP8, a plain cast otherwise."""
    if is_fp8(cache_dtype):
        return saturate_to_fp8(x.float() / scale) if scale != 1.0 else saturate_to_fp8(x)
    return x.to(cache_dtype)


def from_cache(x: torch.Tensor, compute_dtype: torch.dtype, scale: float) -> torch.Tensor:
    """Stored K or V back in the compute dtype (x8 * scale for FP8)."""
    if is_fp8(x.dtype):
        y = x.to(compute_dtype)
        return y * scale if scale != 1.0 else y
    return x.to(compute_dtype)
