"""The `Attention` layer and the paged KV cache's allocation and size.

KV cache, one tensor per layer: [2, num_blocks, block_size, num_kv_heads, head_dim] (K then V);
the batch contract and the per-step index tensors are in refengine/attention/metadata.py. A step
runs on the Triton kernels (refengine/kernels) on a GPU when they apply; on CPU its decodes run on
the C++ paged decode kernel (kernels/cpu_paged_decode.py) and its prefills on the C++ paged prefill
kernel (kernels/cpu_paged_prefill.py) when they build and the cache is float32 or bfloat16;
everything else on the plain-PyTorch reference (refengine/attention/reference.py), which is also
the oracle the kernels are tested against.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from refengine.attention.metadata import AttentionMetadata
from refengine.attention.reference import paged_attention, store_kv
from refengine.kernels import cpu_paged_decode, cpu_paged_prefill
from refengine.numerics.kv_cache import kv_cache_bytes_per_token


class Attention(nn.Module):
    """Stores this step's K/V into the layer's paged cache, then attends over each sequence's context.

    `k_scale` / `v_scale`: this layer's FP8 KV scales (used only when the cache is FP8; 1.0 until
    calibrated). `kv_observer`, when set, sees every K/V before it is stored (calibration).
    On a GPU the Triton kernels (refengine/kernels) take the step when they apply; the PyTorch
    reference (refengine/attention/reference.py) is the fallback and the oracle they are tested against."""

    def __init__(self, num_heads: int, head_dim: int, scale: float, num_kv_heads: int):
        super().__init__()
        self.num_heads, self.head_dim, self.scale, self.num_kv_heads = num_heads, head_dim, scale, num_kv_heads
        self.k_scale, self.v_scale = 1.0, 1.0
        # (layer, k, v) -> None: sees every K/V before it is stored (quant/kv_calibration.py)
        self.kv_observer: Callable[[Attention, torch.Tensor, torch.Tensor], None] | None = None
        self.use_kernels = True

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_cache: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        if self.kv_observer is not None:
            self.kv_observer(self, k, v)
        if q.is_cuda and self.use_kernels:
            # Imported here, not at the top: a CPU engine never loads (decorates) a Triton kernel.
            from refengine.kernels.dispatch import attention_with_kernels

            out = attention_with_kernels(self, q, k, v, kv_cache, meta)
            if out is not None:
                return out
        store_kv(k, v, kv_cache, meta.slot_mapping, self.k_scale, self.v_scale)
        if meta.prefills and self.use_kernels and cpu_paged_prefill.applies(q, kv_cache, self.num_heads):
            return self._prefills_on_cpu_kernel(q, kv_cache, meta)
        if meta.decode_token_indices is not None and self.use_kernels and cpu_paged_decode.applies(q, kv_cache):
            return self._decode_on_cpu_kernel(q, kv_cache, meta)
        return paged_attention(q, kv_cache, meta, self.num_heads, self.scale, self.k_scale, self.v_scale).to(q.dtype)

    def _prefills_on_cpu_kernel(self, q, kv_cache, meta: AttentionMetadata) -> torch.Tensor:
        """Prefills on the CPU prefill kernel, the step's decodes (if any) on the decode kernel or the reference."""
        assert meta.prefill_block_tables is not None and meta.prefill_rows is not None  # set with meta.prefills
        out = cpu_paged_prefill.paged_prefill_cpu(
            q, kv_cache, meta.prefill_block_tables, meta.prefill_rows, self.num_heads, self.scale
        )
        d = meta.decode_token_indices
        if d is not None:
            if cpu_paged_decode.applies(q, kv_cache):
                assert meta.decode_block_tables is not None and meta.decode_seq_lens is not None
                out[d] = cpu_paged_decode.paged_decode_cpu(
                    q[d], kv_cache, meta.decode_block_tables, meta.decode_seq_lens, self.num_heads, self.scale
                )
            else:
                decodes_only = dataclasses.replace(meta, prefills=[])
                out[d] = paged_attention(
                    q, kv_cache, decodes_only, self.num_heads, self.scale, self.k_scale, self.v_scale
                )[d].float()
        return out.to(q.dtype)

    def _decode_on_cpu_kernel(self, q, kv_cache, meta: AttentionMetadata) -> torch.Tensor:
        """Decodes on the CPU kernel (reads the cache in place); any prefills of the step on the reference."""
        # build_attention_metadata sets both whenever the step has decodes
        assert meta.decode_block_tables is not None and meta.decode_seq_lens is not None
        qd = q if meta.decode_only else q[meta.decode_token_indices]
        od = cpu_paged_decode.paged_decode_cpu(
            qd, kv_cache, meta.decode_block_tables, meta.decode_seq_lens, self.num_heads, self.scale
        ).to(q.dtype)
        if meta.decode_only:
            return od
        prefills_only = dataclasses.replace(meta, decode_token_indices=None, decode_slots=None, decode_mask=None)
        out = paged_attention(q, kv_cache, prefills_only, self.num_heads, self.scale, self.k_scale, self.v_scale).to(
            q.dtype
        )
        out[meta.decode_token_indices] = od
        return out


def kv_cache_bytes_per_block(model_config, block_size: int, dtype: torch.dtype, tp_size: int = 1) -> int:
    """Bytes one block id costs across all layers: 2 x layers x block_size x kv_heads x head_dim x itemsize
    (`dtype` is the KV cache's own dtype: 1 byte for FP8)."""
    return block_size * kv_cache_bytes_per_token(model_config, dtype, tp_size=tp_size)


def allocate_kv_caches(
    model_config, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device | str, tp_size: int = 1
) -> list[torch.Tensor]:
    """One [2, num_blocks, block_size, kv_heads, head_dim] tensor per layer.

    Zero-filled, not empty: padded decode rows gather unused slots and a masked-out score times a
    NaN of uninitialised memory would still poison the output."""
    kv_heads = max(1, model_config.num_key_value_heads // tp_size)
    shape = (2, num_blocks, block_size, kv_heads, model_config.head_dim)
    return [torch.zeros(shape, dtype=dtype, device=device) for _ in range(model_config.num_hidden_layers)]
