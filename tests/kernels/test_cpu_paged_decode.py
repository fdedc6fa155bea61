"""The CPU paged decode kernel (kernels/cpu_paged_decode.py) against the PyTorch oracle.

Covered: ragged contexts, a one-token context, a context ending exactly on a block boundary,
shuffled block tables, GQA / MQA / MHA, block sizes 1, 4 and 16, one and two threads, a step
mixing decodes and prefills through the Attention layer, and the clean fallback when the kernel
cannot be built or is switched off.
"""

from __future__ import annotations

import random

import pytest
import torch

from refengine.attention.metadata import build_attention_metadata
from refengine.attention.reference import paged_attention, store_kv
from refengine.kernels import cpu_paged_decode
from refengine.model.layers.attention import Attention

pytestmark = pytest.mark.skipif(not cpu_paged_decode.available(), reason="no C++ compiler here")


def _case(lengths, bs, heads, kv_heads, head_dim, seed=0):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-n // bs) for n in lengths) + 3
    cache = torch.zeros(2, num_blocks, bs, kv_heads, head_dim)
    free = list(range(num_blocks))
    rng.shuffle(free)
    seqs = [(n - 1, 1, [free.pop() for _ in range(-(-n // bs))]) for n in lengths]
    fill = build_attention_metadata([(0, n, ids) for n, (_, _, ids) in zip(lengths, seqs)], bs)
    total = sum(lengths)
    store_kv(torch.randn(total, kv_heads * head_dim, generator=g), torch.randn(total, kv_heads * head_dim, generator=g),
             cache, fill.slot_mapping)
    q = torch.randn(len(lengths), heads * head_dim, generator=g)
    return q, cache, build_attention_metadata(seqs, bs)


@pytest.mark.parametrize("heads,kv_heads", [(16, 4), (4, 1), (4, 4)])
@pytest.mark.parametrize("bs", [1, 4, 16])
@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_matches_reference(heads, kv_heads, bs, threads):
    lengths = [1, 5, 16, 17, 64, 3, 100, 33]
    q, cache, meta = _case(lengths, bs, heads, kv_heads, 32)
    want = paged_attention(q, cache, meta, heads, 0.17)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = cpu_paged_decode.paged_decode_cpu(q, cache, meta.block_tables, meta.seq_lens, heads, 0.17)
    finally:
        torch.set_num_threads(old)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_mixed_step_through_the_layer_matches_reference():
    """Decodes on the kernel, the prefill chunk (after a cached prefix) on the reference, one step."""
    bs, heads, kv_heads, d = 4, 8, 2, 16
    g = torch.Generator().manual_seed(3)
    cache = torch.zeros(2, 40, bs, kv_heads, d)
    prior = build_attention_metadata([(0, 9, [5, 6, 7]), (0, 6, [1, 2]), (0, 4, [10])], bs)
    store_kv(torch.randn(19, kv_heads * d, generator=g), torch.randn(19, kv_heads * d, generator=g), cache,
             prior.slot_mapping)
    # seq 0 decodes at 9, seq 1 prefills 5 more tokens from 6, seq 2 decodes at 4.
    meta = build_attention_metadata([(9, 1, [5, 6, 7]), (6, 5, [1, 2, 3]), (4, 1, [10, 11])], bs)
    q = torch.randn(7, heads * d, generator=g)
    k, v = torch.randn(7, kv_heads * d, generator=g), torch.randn(7, kv_heads * d, generator=g)
    layer = Attention(heads, d, d ** -0.5, kv_heads)
    ref_cache = cache.clone()
    store_kv(k, v, ref_cache, meta.slot_mapping)
    want = paged_attention(q, ref_cache, meta, heads, d ** -0.5)
    got = layer(q, k, v, cache, meta)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cache, ref_cache)


def test_switched_off_or_unbuildable_falls_back(monkeypatch, tmp_path):
    q, cache, meta = _case([7, 20], 4, 4, 2, 16)
    monkeypatch.setattr(cpu_paged_decode, "ENABLED", False)
    assert not cpu_paged_decode.applies(q, cache)
    monkeypatch.setattr(cpu_paged_decode, "ENABLED", True)
    assert not cpu_paged_decode.applies(q, cache.to(torch.bfloat16))   # float32 caches only
    # A machine without a working compiler: the build fails, available() says so, nothing raises.
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "/bin/false")
    cpu_paged_decode._library.cache_clear()
    cpu_paged_decode.available.cache_clear()
    try:
        assert not cpu_paged_decode.available()
        assert not cpu_paged_decode.applies(q, cache)
    finally:
        cpu_paged_decode._library.cache_clear()
        cpu_paged_decode.available.cache_clear()
        monkeypatch.undo()
    assert cpu_paged_decode.available()
