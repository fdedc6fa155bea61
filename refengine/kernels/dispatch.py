"""When the Triton kernels run, and the PyTorch fallback otherwise.

Selected automatically on a CUDA device when Triton imports: the KV store on every step, the
paged decode kernel on decode-only steps (a step with a prefill uses PyTorch's SDPA for the
whole step: prefill is compute-bound and SDPA's flash path is already good), the FP8
dequantization on every weight-only FP8 linear. `REFENGINE_KERNELS=0` turns them all off (to
A/B them, or if a Triton build misbehaves); anything a kernel cannot take (a non-power-of-two
block size, a non-contiguous cache) falls back to the PyTorch path (refengine/attention/reference.py),
which is also the oracle the kernels are tested against (tests/refengine/kernels).
"""

from __future__ import annotations

import functools
import os

import torch

from refengine.attention.reference import paged_attention
from refengine.numerics.fp8 import BLOCK, dequantize

# Split-K pays off once one (sequence, KV head) program would walk many blocks while most of the
# GPU idles: fewer programs than SMs and contexts of at least this many tokens.
SPLIT_K_MIN_CONTEXT = 1024
SPLIT_K_TOKENS_PER_SPLIT = 512


@functools.lru_cache(maxsize=None)
def kernels_enabled() -> bool:
    if os.environ.get("REFENGINE_KERNELS", "1") == "0":
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def choose_num_splits(batch: int, kv_heads: int, max_context: int, device: torch.device) -> int:
    """1 unless the context is long and B x KV-heads programs leave SMs idle."""
    if max_context < SPLIT_K_MIN_CONTEXT:
        return 1
    sms = _sm_count(device.index or 0) if device.type == "cuda" else 132
    programs = batch * kv_heads
    if programs >= sms:
        return 1
    return max(1, min(-(-max_context // SPLIT_K_TOKENS_PER_SPLIT), -(-2 * sms // programs)))


def attention_with_kernels(layer, q, k, v, kv_cache, meta):
    """The Attention layer's step on Triton kernels, or None to let the PyTorch path run it."""
    if not kernels_enabled() or not kv_cache.is_contiguous():
        return None
    block_size = kv_cache.shape[2]
    if block_size & (block_size - 1):
        return None
    from refengine.kernels.kv_store import store_kv_triton

    store_kv_triton(k, v, kv_cache, meta.slot_mapping, layer.k_scale, layer.v_scale)
    if meta.decode_only:
        from refengine.kernels.paged_decode import paged_decode_attention

        splits = choose_num_splits(q.shape[0], kv_cache.shape[3], meta.decode_slots.shape[1], q.device)
        return paged_decode_attention(
            q,
            kv_cache,
            meta.block_tables,
            meta.seq_lens,
            layer.num_heads,
            layer.scale,
            layer.k_scale,
            layer.v_scale,
            num_splits=splits,
        )
    return paged_attention(q, kv_cache, meta, layer.num_heads, layer.scale, layer.k_scale, layer.v_scale).to(q.dtype)


def fp8_dequantize(w8: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, block: int = BLOCK) -> torch.Tensor:
    """FP8 weight -> compute dtype: the Triton kernel on GPU, PyTorch otherwise."""
    if w8.is_cuda and kernels_enabled():
        from refengine.kernels.fp8_dequant import fp8_dequantize_triton

        return fp8_dequantize_triton(w8, scale, dtype, block)
    return dequantize(w8, scale, dtype, block)
