"""The kernels for real, on a lent GPU (skipped without CUDA): the engine with kernels on vs off,
and long contexts through split-K at production-like shapes."""

from __future__ import annotations

import pytest
import torch

from refengine import LLM, SamplingParams
from refengine.attention.metadata import build_attention_metadata
from refengine.attention.reference import paged_attention, store_kv
from refengine.model.layers.attention import allocate_kv_caches
from refengine.numerics.fp8 import FP8_DTYPE

pytestmark = pytest.mark.gpu


def _engine_tokens(monkeypatch, flag: str, **kw):
    from refengine.kernels import dispatch

    monkeypatch.setenv("REFENGINE_KERNELS", flag)
    dispatch.kernels_enabled.cache_clear()
    try:
        llm = LLM("tiny-test", device="cuda", dtype="float32", kv_cache_memory_bytes=1 << 24, **kw)
        params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
        return [o.outputs[0].token_ids for o in llm.generate(["hello world", "the cat", "a b c d e f"], params)]
    finally:
        dispatch.kernels_enabled.cache_clear()


@pytest.mark.parametrize("kv", ["auto", "fp8"])
def test_engine_kernels_on_and_off_agree(monkeypatch, kv):
    assert _engine_tokens(monkeypatch, "1", kv_cache_dtype=kv) == _engine_tokens(monkeypatch, "0", kv_cache_dtype=kv)


class Cfg:
    num_hidden_layers, num_key_value_heads, head_dim = 1, 8, 128


@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, FP8_DTYPE])
@pytest.mark.parametrize("num_splits", [1, 8])
def test_long_context_decode(cache_dtype, num_splits):
    from refengine.kernels.paged_decode import paged_decode_attention

    bs, lengths = 16, [4096, 1000, 17]
    nblocks = sum(-(-n // bs) for n in lengths)
    cache = allocate_kv_caches(Cfg, nblocks + 4, bs, cache_dtype, "cuda")[0]
    perm = torch.randperm(nblocks + 4).tolist()
    seqs, i = [], 0
    for n in lengths:
        nb = -(-n // bs)
        seqs.append((n - 1, 1, perm[i : i + nb]))
        i += nb
    fill = build_attention_metadata([(0, n, ids) for n, (_, _, ids) in zip(lengths, seqs)], bs, "cuda")
    k = torch.randn(fill.num_tokens, 8 * 128, device="cuda")
    v = torch.randn(fill.num_tokens, 8 * 128, device="cuda")
    store_kv(k, v, cache, fill.slot_mapping, 0.02, 0.02)
    meta = build_attention_metadata(seqs, bs, "cuda")
    q = torch.randn(3, 32 * 128, device="cuda", dtype=torch.bfloat16)
    want = paged_attention(q.float(), cache, meta, 32, 128**-0.5, 0.02, 0.02)
    got = paged_decode_attention(
        q, cache, meta.block_tables, meta.seq_lens, 32, 128**-0.5, 0.02, 0.02, num_splits=num_splits
    )
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)
