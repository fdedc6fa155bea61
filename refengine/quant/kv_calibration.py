"""Per-layer FP8 KV scales measured on a few prompts (`calculate_kv_scales`).

Each layer's K and V amax over the calibration prompts gives scale = amax / 448, so the largest
value seen maps onto E4M3's largest code. Prompts run through the model with a scratch
full-precision KV cache (the real cache is not touched, and no block is left behind in the
prefix cache). A layer whose amax stays below 448 would fit unscaled too, but a measured scale
still uses more of the format's codes, so it is kept.
"""

from __future__ import annotations

import torch

from refengine.attention.metadata import build_attention_metadata
from refengine.model.layers.attention import Attention, allocate_kv_caches
from refengine.numerics.fp8 import FP8_MAX

# Short, varied English text: enough to see typical activations of a real checkpoint.
CALIBRATION_TEXTS = (
    "The quick brown fox jumps over the lazy dog while the farmer counts his sheep.",
    "In 1969 the first humans walked on the Moon; the mission lasted eight days.",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "Paged attention stores the key-value cache in fixed-size blocks, like virtual memory pages.",
)


@torch.no_grad()
def run_with_scratch_cache(model, token_ids: list[int], block_size: int, device, dtype) -> torch.Tensor:
    """One prefill of `token_ids` through `model` on a private KV cache -> hidden states [T, H].

    Shared by calibration and the quality check's teacher forcing (every position's logits)."""
    n = len(token_ids)
    nblocks = -(-n // block_size)
    caches = allocate_kv_caches(model.config, nblocks, block_size, dtype, device)
    meta = build_attention_metadata([(0, n, list(range(nblocks)))], block_size, device)
    ids = torch.tensor(token_ids, dtype=torch.long, device=device)
    pos = torch.arange(n, dtype=torch.long, device=device)
    return model(ids, pos, caches, meta)


@torch.no_grad()
def calibrate_kv_scales(model, prompts: list[list[int]], block_size: int, device, dtype) -> list[tuple[float, float]]:
    """Set every Attention layer's k_scale / v_scale from amax over `prompts`; returns them."""
    layers = [m for m in model.modules() if isinstance(m, Attention)]
    amax = {id(m): [0.0, 0.0] for m in layers}

    def observe(layer, k, v):
        a = amax[id(layer)]
        a[0] = max(a[0], float(k.abs().max()))
        a[1] = max(a[1], float(v.abs().max()))

    for m in layers:
        m.kv_observer = observe
    try:
        for ids in prompts:
            if ids:
                run_with_scratch_cache(model, ids, block_size, device, dtype)
    finally:
        for m in layers:
            m.kv_observer = None
    scales = []
    for m in layers:
        k_amax, v_amax = amax[id(m)]
        # An all-zero observation (no prompts) keeps the default 1.0 rather than a zero scale.
        m.k_scale = k_amax / FP8_MAX if k_amax > 0 else 1.0
        m.v_scale = v_amax / FP8_MAX if v_amax > 0 else 1.0
        scales.append((m.k_scale, m.v_scale))
    return scales
