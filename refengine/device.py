"""Where a rank runs and in what precision: device, model dtype, FP8 weights, KV-cache dtype.

One resolution for every process of an engine: `LLMEngine` (rank 0, or the only process) and
the torchrun workers (`distributed.launch.run_torchrun_worker`) both call `resolve_device_setup`,
so all ranks agree on the weights they load, the KV dtype and therefore the block count.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from refengine.errors import RefEngineError
from refengine.numerics.kv_cache import resolve_kv_cache_dtype
from refengine.quant.config import QuantConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RefEngineError("device='cuda' was asked for but no CUDA GPU is visible; use device='cpu'")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        # float32 on CPU: without native bfloat16 (an AVX2 host) float32 is the faster one; with it
        # (numerics/cpu_bfloat16.py: AMX), ask for --dtype bfloat16 (bench/RESULTS.md, vs_vllm on AMX).
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    return DTYPES[name]


@dataclass(frozen=True)
class DeviceSetup:
    device: torch.device
    dtype: torch.dtype  # the model's compute dtype
    quant: QuantConfig  # FP8 weights (or none) and the precision policy
    kv_cache_dtype: torch.dtype  # the KV cache's own dtype (float8_e4m3fn for an FP8 cache)


def resolve_device_setup(args, model_dir: str | Path) -> DeviceSetup:
    """Device, dtype, quantization and KV-cache dtype from `EngineArgs` and the checkpoint's format."""
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    quant = QuantConfig.resolve(
        args.quantization,
        args.fp8_weight_scales,
        args.quantization_skip,
        args.kv_cache_dtype,
        args.calculate_kv_scales,
        model_dir,
        dtype,
        device,
    )
    return DeviceSetup(device, dtype, quant, resolve_kv_cache_dtype(args.kv_cache_dtype, dtype))
