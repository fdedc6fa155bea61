"""Rotary position embedding (RoPE), neox style as in HF Llama (`rotate_half`), with scaling.

The cos/sin table is computed once for every position the model can see and indexed by each
token's position, so a step with tokens at arbitrary positions (decode, chunked prefill, prefix
hits) needs no per-step trigonometry. The table stays float32; q and k are rotated in float32
and cast back, which is at least as accurate as HF's bf16 path and identical in float32.

Scaling types (rope_scaling["rope_type"]), with the same formulas as transformers:
- default / None: inv_freq = theta^(-2i/d).
- linear: positions divided by `factor` (inv_freq / factor).
- dynamic (NTK-aware): transformers recomputes the base from the longest sequence in the batch,
  which makes a token's encoding depend on its batch-mates and breaks KV-cache reuse. Like vLLM,
  we fix the base for the maximal length max_position_embeddings * factor. For sequences shorter
  than max_position_embeddings this differs from transformers (which then uses plain RoPE).
- llama3: low frequencies divided by `factor`, high frequencies kept, smooth ramp between.
- yarn: NTK-by-parts interpolation, plus the attention factor (mscale, 0.1 ln(factor) + 1 by
  default) that multiplies cos and sin, i.e. scales q.k by its square.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from refengine.kernels import cpu_layer_ops


def _base_inv_freq(theta: float, dim: int) -> torch.Tensor:
    # int64 arange then float, as transformers does, so the table is bit-identical.
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def _llama3_inv_freq(inv_freq: torch.Tensor, s: dict) -> torch.Tensor:
    factor, low, high = s["factor"], s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0)
    old_len = s["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def _yarn_inv_freq(theta: float, dim: int, s: dict, max_position: int) -> tuple[torch.Tensor, float]:
    orig = s["original_max_position_embeddings"]
    factor = s.get("factor") or max_position / orig

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attn_factor = s.get("attention_factor")
    if attn_factor is None:
        m, m_all = s.get("mscale"), s.get("mscale_all_dim")
        attn_factor = mscale(factor, m) / mscale(factor, m_all) if (m and m_all) else mscale(factor)
    beta_fast, beta_slow = s.get("beta_fast") or 32, s.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        # The dimension whose wavelength completes `rotations` turns over the original context.
        return dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extrapolation_weight = 1 - ramp  # 1 for high-frequency dims: keep them as trained
    pos_freqs = theta ** (torch.arange(0, dim, 2).float() / dim)
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation_weight) + (1.0 / pos_freqs) * extrapolation_weight
    return inv_freq, float(attn_factor)


def compute_inv_freq(
    head_dim: int, theta: float, scaling: dict[str, Any] | None, max_position: int
) -> tuple[torch.Tensor, float, int]:
    """Returns (inv_freq [head_dim/2], cos/sin multiplier, number of positions to tabulate)."""
    s = scaling or {}
    rope_type = s.get("rope_type", "default")
    if rope_type == "default":
        return _base_inv_freq(theta, head_dim), 1.0, max_position
    if rope_type == "linear":
        return _base_inv_freq(theta, head_dim) / s["factor"], 1.0, int(max_position * s["factor"])
    if rope_type == "dynamic":
        factor = s["factor"]
        max_len = int(max_position * factor)
        base = theta * ((factor * max_len / max_position) - (factor - 1)) ** (head_dim / (head_dim - 2))
        return _base_inv_freq(base, head_dim), 1.0, max_len
    if rope_type == "llama3":
        return _llama3_inv_freq(_base_inv_freq(theta, head_dim), s), 1.0, max_position
    if rope_type == "yarn":
        inv_freq, attn_factor = _yarn_inv_freq(theta, head_dim, s, max_position)
        length = max(max_position, int(s["original_max_position_embeddings"] * (s.get("factor") or 1)))
        return inv_freq, attn_factor, length
    raise ValueError(f"unknown rope type {rope_type!r}")


class RotaryEmbedding(nn.Module):
    cos_sin_cache: torch.Tensor  # a buffer (register_buffer), declared for the type checker

    def __init__(self, head_dim: int, max_position: int, theta: float, scaling: dict | None = None):
        super().__init__()
        self.head_dim = head_dim
        inv_freq, mult, length = compute_inv_freq(head_dim, theta, scaling, max_position)
        self.max_position = length
        freqs = torch.arange(length, dtype=torch.float32)[:, None] * inv_freq[None, :]
        # [max_pos, head_dim]: cos in the first half, sin in the second (one gather per step).
        cache = torch.cat([freqs.cos() * mult, freqs.sin() * mult], dim=-1)
        self.register_buffer("cos_sin_cache", cache.to(torch.float32), persistent=False)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        shape, dtype = x.shape, x.dtype
        x = x.view(shape[0], -1, self.head_dim).float()
        x1, x2 = x.chunk(2, dim=-1)
        # == x * cat(cos, cos) + rotate_half(x) * cat(sin, sin), with rotate_half(x) = cat(-x2, x1).
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
        return out.to(dtype).view(shape)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [T]; q [T, heads*head_dim]; k [T, kv_heads*head_dim] -> rotated (q, k). On CPU (float32,
        bfloat16, rows with a contiguous last dim, as a split of qkv has) each is one C++ pass
        (kernels/cpu_layer_ops.py)."""
        if self._fused(q) and self._fused(k):
            table = self.cos_sin_cache
            return cpu_layer_ops.rope(q, positions, table, self.head_dim), cpu_layer_ops.rope(
                k, positions, table, self.head_dim
            )
        cos, sin = self.cos_sin_cache[positions].unsqueeze(1).chunk(2, dim=-1)  # [T, 1, head_dim/2]
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)

    def _fused(self, x: torch.Tensor) -> bool:
        table = self.cos_sin_cache  # float32 unless the module was cast (Module.to casts buffers too)
        return x.stride(-1) == 1 and table.dtype == torch.float32 and cpu_layer_ops.applies(x)
