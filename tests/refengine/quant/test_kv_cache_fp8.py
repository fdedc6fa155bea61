"""FP8 KV cache store/load: x / scale stored as E4M3, x8 * scale loaded; paged attention over it."""

from __future__ import annotations

import random

import pytest
import torch

from refengine.attention.metadata import build_attention_metadata
from refengine.attention.reference import paged_attention, store_kv
from refengine.model.layers.attention import allocate_kv_caches
from refengine.numerics.fp8 import FP8_DTYPE


class Cfg:
    num_hidden_layers, num_key_value_heads, head_dim = 1, 2, 16


@pytest.mark.parametrize("scale", [1.0, 0.01, 3.0])
def test_store_then_load_round_trip(scale):
    g = torch.Generator().manual_seed(0)
    cache = allocate_kv_caches(Cfg, 4, 4, FP8_DTYPE, "cpu")[0]
    k = torch.randn(6, 32, generator=g) * scale * 50
    v = torch.randn(6, 32, generator=g) * scale * 50
    slots = torch.tensor([13, 0, 5, 7, 2, 15])
    store_kv(k, v, cache, slots, k_scale=scale, v_scale=scale * 2)
    flat = cache.view(2, 16, 2, 16)
    back_k = flat[0, slots].float().reshape(6, 32) * scale
    back_v = flat[1, slots].float().reshape(6, 32) * scale * 2
    for x, back, s in ((k, back_k, scale), (v, back_v, scale * 2)):
        assert float(((x - back).abs() - (2**-4 * x.abs() + 2**-10 * s)).max()) <= 1e-6
    untouched = torch.ones(16, dtype=torch.bool)
    untouched[slots] = False
    assert flat[0, untouched].float().abs().sum() == 0


def test_out_of_range_values_saturate_not_nan():
    cache = allocate_kv_caches(Cfg, 1, 4, FP8_DTYPE, "cpu")[0]
    k = torch.full((1, 32), 1e6)
    store_kv(k, -k, cache, torch.tensor([1]), 1.0, 1.0)
    assert cache.float().isfinite().all() and float(cache.float().max()) == 448.0


def test_paged_attention_over_fp8_cache_matches_fp32():
    """Same K/V written to a float32 and an FP8 cache (ragged decodes + a chunked prefill): outputs agree
    to FP8 precision, and exactly when the values are representable."""
    rng = random.Random(0)
    torch.manual_seed(0)
    bs, heads = 4, 4
    caches = {dt: allocate_kv_caches(Cfg, 16, bs, dt, "cpu")[0] for dt in (torch.float32, FP8_DTYPE)}
    seqs, blocks = [], list(range(16))
    rng.shuffle(blocks)
    for ctx, new in ((5, 1), (9, 1), (3, 4)):  # two decodes of ragged length, one chunked prefill
        need = -(-(ctx + new) // bs)
        seqs.append((ctx, new, [blocks.pop() for _ in range(need)]))
    scale = 0.05
    for start, _new, ids in seqs:  # fill the context that is already cached
        if start:
            meta = build_attention_metadata([(0, start, ids)], bs)
            k, v = torch.randn(start, 32), torch.randn(start, 32)
            for c in caches.values():
                store_kv(k, v, c, meta.slot_mapping, scale, scale)
    meta = build_attention_metadata(seqs, bs)
    q = torch.randn(meta.num_tokens, heads * 16)
    k, v = torch.randn(meta.num_tokens, 32), torch.randn(meta.num_tokens, 32)
    out = {}
    for dt, c in caches.items():
        store_kv(k, v, c, meta.slot_mapping, scale, scale)
        out[dt] = paged_attention(q, c, meta, heads, 0.25, scale, scale)
    err = (out[torch.float32] - out[FP8_DTYPE]).abs().max()
    assert 0 < float(err) < 0.1
