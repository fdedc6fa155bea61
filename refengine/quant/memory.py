"""What FP8 saves: weight bytes and KV bytes, against the same model unquantized.

`weight_bytes` counts parameters as they are stored (FP8 weights at 1 byte, their float32
scales, everything else in the compute dtype); `weight_bytes_unquantized` is the same model with
every weight in the compute dtype. On CPU the weight-only path also keeps a dequantized copy of
each FP8 weight (fp8_matmul.py says why); that copy is reported on its own line, not hidden.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from refengine.numerics.fp8 import FP8_DTYPE


@dataclass
class QuantMemoryReport:
    weight_bytes: int
    weight_bytes_unquantized: int
    dequant_cache_bytes: int
    kv_bytes_per_token: int
    kv_bytes_per_token_unquantized: int
    num_kv_blocks: int
    num_kv_blocks_unquantized: int

    @property
    def weight_bytes_saved(self) -> int:
        return self.weight_bytes_unquantized - self.weight_bytes

    @property
    def kv_blocks_gained(self) -> int:
        return self.num_kv_blocks - self.num_kv_blocks_unquantized

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "weight_bytes_saved": self.weight_bytes_saved,
            "kv_blocks_gained": self.kv_blocks_gained,
        }

    def summary(self) -> str:
        mib = 1 << 20
        line = (
            f"weights {self.weight_bytes / mib:.1f} MiB (unquantized {self.weight_bytes_unquantized / mib:.1f} MiB, "
            f"saved {self.weight_bytes_saved / mib:.1f} MiB)"
        )
        if self.dequant_cache_bytes:
            line += f" + CPU dequantized-weight cache {self.dequant_cache_bytes / mib:.1f} MiB"
        line += (
            f"; KV {self.kv_bytes_per_token} B/token (unquantized {self.kv_bytes_per_token_unquantized}), "
            f"{self.num_kv_blocks} blocks vs {self.num_kv_blocks_unquantized} "
            f"(x{self.num_kv_blocks / max(1, self.num_kv_blocks_unquantized):.2f})"
        )
        return line


def weight_bytes(model: torch.nn.Module, compute_dtype: torch.dtype, cache_dequantized: bool) -> tuple[int, int, int]:
    """(stored bytes, bytes if unquantized, dequantized-cache bytes) over the model's parameters."""
    itemsize = torch.empty(0, dtype=compute_dtype).element_size()
    stored = unquantized = cache = 0
    for name, p in model.named_parameters():  # tied weights appear once
        stored += p.numel() * p.element_size()
        if name.endswith(("weight_scale", "weight_scale_inv")):
            continue
        unquantized += p.numel() * (itemsize if p.dtype == FP8_DTYPE else p.element_size())
        if p.dtype == FP8_DTYPE and cache_dequantized:
            cache += p.numel() * itemsize
    return stored, unquantized, cache
