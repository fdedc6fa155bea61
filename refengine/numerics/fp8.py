"""The FP8 E4M3 format and its three scale kinds: per-tensor, per-channel and 128x128 blocks.

E4M3 ("float8_e4m3fn": 4 exponent bits, 3 mantissa bits, no infinities) holds magnitudes up to
448 with about 2 significant decimal digits (a relative step of 2^-3 near the top of each
binade, so the worst rounding error is 2^-4 = 6.25% of the value, not of the range).

A quantized tensor is `w8 * scale`: the scale maps the tensor's largest magnitude (amax) onto
448, so `scale = amax / 448` and `w8 = saturate(w / scale)`. The scale kinds differ in how many
values share one amax:

- per-tensor: one scale. E4M3's exponent spans ~2^15, so moderate outliers cost little (unlike
  INT8), but a large one pushes every other value into the subnormals, where precision is lost.
- per-channel: one scale per output row (`[out, 1]`); the default, what compressed-tensors and
  most serving stacks use for weights.
- block: one scale per 128x128 tile (`[ceil(out/128), ceil(in/128)]`, DeepSeek-V3 / Qwen3
  "fine-grained" FP8, stored in checkpoints as `weight_scale_inv`, which despite the name is
  multiplied, not divided).
- per-token (activations, W8A8): one scale per row of x, computed on the fly.

Casting to float8 is not reliably saturating in PyTorch (c10's scalar conversion turns overflow
into NaN; this CPU build's vectorized cast happens to clamp), hence the explicit clamp.
"""

from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448.0
BLOCK = 128  # fine-grained block edge (both dims)
# A zero row or tile would give scale 0 and 0/0 = NaN; any positive floor keeps it exactly 0.
_MIN_SCALE = 1e-12

SCALE_KINDS = ("tensor", "channel", "block")


def saturate_to_fp8(x: torch.Tensor) -> torch.Tensor:
    """Clamp to the E4M3 range and cast (PyTorch's cast would turn overflow into NaN)."""
    return x.clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def quantize_per_tensor(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (w8, scale of shape [1]) with w ≈ w8 * scale."""
    scale = (w.abs().amax().float() / FP8_MAX).clamp(min=_MIN_SCALE).reshape(1)
    return saturate_to_fp8(w.float() / scale), scale


def quantize_per_channel(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in] -> (w8, scale [out, 1]); each output row gets its own scale."""
    scale = (w.abs().amax(dim=1, keepdim=True).float() / FP8_MAX).clamp(min=_MIN_SCALE)
    return saturate_to_fp8(w.float() / scale), scale


def _pad_to_blocks(w: torch.Tensor, block: int) -> torch.Tensor:
    out, inp = w.shape
    pad_out, pad_in = (-out) % block, (-inp) % block
    return torch.nn.functional.pad(w, (0, pad_in, 0, pad_out)) if pad_out or pad_in else w


def quantize_blocks(w: torch.Tensor, block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in] -> (w8 [out, in], scale [ceil(out/block), ceil(in/block)]).

    Ragged edges are zero-padded for the amax only; padding never changes a tile's maximum."""
    out, inp = w.shape
    padded = _pad_to_blocks(w.float(), block)
    bo, bi = padded.shape[0] // block, padded.shape[1] // block
    tiles = padded.view(bo, block, bi, block)
    scale = (tiles.abs().amax(dim=(1, 3)) / FP8_MAX).clamp(min=_MIN_SCALE)
    w8 = saturate_to_fp8(tiles / scale[:, None, :, None]).view(bo * block, bi * block)[:out, :inp]
    return w8.contiguous(), scale


def expand_block_scale(scale: torch.Tensor, shape: tuple[int, ...], block: int = BLOCK) -> torch.Tensor:
    """[ceil(out/b), ceil(in/b)] tile scales -> one scale per element, [out, in]."""
    full = scale.repeat_interleave(block, dim=0).repeat_interleave(block, dim=1)
    return full[: shape[0], : shape[1]]


def scale_kind(scale: torch.Tensor, weight_shape: tuple[int, ...]) -> str:
    """Which kind a scale tensor is, from its shape alone."""
    if scale.numel() == 1:
        return "tensor"
    if scale.dim() == 2 and scale.shape == (weight_shape[0], 1):
        return "channel"
    return "block"


def dequantize(
    w8: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32, block: int = BLOCK
) -> torch.Tensor:
    """w8 * scale in `dtype`, for any of the three scale kinds (told apart by the scale's shape)."""
    kind = scale_kind(scale, tuple(w8.shape))
    w = w8.to(torch.float32)
    if kind == "block":
        w = w * expand_block_scale(scale.float(), tuple(w8.shape), block)
    else:
        w = w * scale.float()
    return w.to(dtype)


def quantize(w: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize a weight with the named scale kind."""
    if kind == "tensor":
        return quantize_per_tensor(w)
    if kind == "channel":
        return quantize_per_channel(w)
    if kind == "block":
        return quantize_blocks(w)
    raise ValueError(f"unknown scale kind {kind!r}; expected one of {SCALE_KINDS}")


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Activations [T, in] -> (x8, scale [T, 1]): dynamic per-token scales for W8A8."""
    scale = (x.abs().amax(dim=-1, keepdim=True).float() / FP8_MAX).clamp(min=_MIN_SCALE)
    return saturate_to_fp8(x.float() / scale), scale
