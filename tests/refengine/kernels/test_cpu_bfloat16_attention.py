"""CPU attention in bfloat16 (attention/reference.py): computed in bfloat16 where the CPU does so
natively, in float32 elsewhere, and close to the float32 result either way."""

from __future__ import annotations

import random

import pytest
import torch

from refengine.attention import reference
from refengine.attention.metadata import build_attention_metadata
from refengine.attention.reference import paged_attention, store_kv
from refengine.numerics.cpu_bfloat16 import cpu_computes_bfloat16


def _step(bs=4, heads=8, kv_heads=2, d=64, seed=0):
    """A step of three decodes (ragged contexts) and one prefill chunk after a cached prefix."""
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    cache = torch.zeros(2, 64, bs, kv_heads, d)
    free = list(range(64))
    rng.shuffle(free)
    lens = [9, 30, 4, 12]
    ids = [[free.pop() for _ in range(-(-(n + 8) // bs))] for n in lens]
    prior = build_attention_metadata([(0, n, b) for n, b in zip(lens, ids)], bs)
    total = sum(lens)
    store_kv(
        torch.randn(total, kv_heads * d, generator=g),
        torch.randn(total, kv_heads * d, generator=g),
        cache,
        prior.slot_mapping,
    )
    meta = build_attention_metadata([(9, 1, ids[0]), (30, 1, ids[1]), (4, 1, ids[2]), (12, 6, ids[3])], bs)
    q = torch.randn(9, heads * d, generator=g)
    return q, cache, meta, heads, d**-0.5


@pytest.mark.parametrize("native", [True, False], ids=["native-bf16", "no-native-bf16"])
def test_bfloat16_attention_is_close_to_float32(monkeypatch, native):
    monkeypatch.setattr(reference.cpu_bfloat16, "cpu_computes_bfloat16", lambda: native)
    q, cache, meta, heads, scale = _step()
    want = paged_attention(q, cache, meta, heads, scale)
    got = paged_attention(q.bfloat16(), cache.bfloat16(), meta, heads, scale)
    assert got.dtype == (torch.bfloat16 if native else torch.float32)  # the dtype it computed in
    torch.testing.assert_close(got.float(), want, atol=3e-2, rtol=3e-2)


def test_float32_attention_is_float32_whatever_the_cpu():
    assert reference._cpu_keeps(torch.float32)
    assert not reference._cpu_keeps(torch.float16)
    assert reference._cpu_keeps(torch.bfloat16) == cpu_computes_bfloat16()
