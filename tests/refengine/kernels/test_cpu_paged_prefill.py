"""The CPU paged prefill kernel (kernels/cpu_paged_prefill.py) against the PyTorch oracle
(attention/reference.py, SDPA over the gathered context).

Covered: prompts from 1 query row past a prefix to several tiles, chunks that start after a prefix
(the shifted causal mask), shuffled block tables and block sizes 1, 4 and 16, GQA / MQA / MHA and
head sizes 16 to 128, float32 and bfloat16 caches, one and two threads, a step mixing prefills and
decodes through the Attention layer (each kernel takes its own rows), a head shape the kernel does
not take (SDPA keeps it) and the switch that turns the kernels off.
"""

from __future__ import annotations

import random

import pytest
import torch

from refengine.attention.metadata import build_attention_metadata
from refengine.attention.reference import paged_attention, store_kv
from refengine.kernels import cpu_paged_prefill
from refengine.model.layers.attention import Attention

needs_kernel = pytest.mark.skipif(
    not cpu_paged_prefill.applies(torch.zeros(1, 64), torch.zeros(2, 1, 16, 1, 64), 1),
    reason="no C++ compiler or no AVX-512 / AVX2 here (the kernel's body is vector only; SDPA runs instead)",
)


def _step(spans, bs, heads, kv_heads, head_dim, dtype=torch.float32, seed=0):
    """A cache holding each sequence's first `start` positions, and the metadata and queries of a step
    that adds `n` tokens to each: spans = [(start, n)]."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-(s + n) // bs) for s, n in spans) + 3
    cache = torch.zeros(2, num_blocks, bs, kv_heads, head_dim, dtype=dtype)
    free = list(range(num_blocks))
    rng.shuffle(free)
    seqs = [(s, n, [free.pop() for _ in range(-(-(s + n) // bs))]) for s, n in spans]
    prefix = [(0, s, ids) for s, _, ids in seqs if s > 0]
    if prefix:
        fill = build_attention_metadata(prefix, bs)
        total = sum(n for _, n, _ in prefix)
        kv = torch.randn(2, total, kv_heads * head_dim, generator=g)
        store_kv(kv[0], kv[1], cache, fill.slot_mapping)
    meta = build_attention_metadata(seqs, bs)
    t = meta.num_tokens
    q = torch.randn(t, heads * head_dim, generator=g)
    k = torch.randn(t, kv_heads * head_dim, generator=g)
    v = torch.randn(t, kv_heads * head_dim, generator=g)
    store_kv(k, v, cache, meta.slot_mapping)
    return cache, meta, q


def _oracle(q, cache, meta, heads, scale):
    """SDPA over the gathered context, in float32 (a bfloat16 cache widened first: exact)."""
    return paged_attention(q, cache.float(), meta, heads, scale)


@needs_kernel
@pytest.mark.parametrize(
    "spans,bs,heads,kv_heads,head_dim",
    [
        ([(0, 5)], 16, 16, 4, 64),  # one short prompt, one tile of rows
        ([(0, 70), (0, 33)], 16, 16, 4, 64),  # several tiles of rows and keys, ragged
        ([(40, 24), (3, 2)], 4, 8, 2, 32),  # chunks after a prefix: the causal mask shifted
        ([(100, 2)], 1, 4, 4, 16),  # MHA (one query head per KV head: 16 rows a tile), block size 1
        ([(0, 48), (17, 31)], 16, 8, 1, 128),  # MQA, the largest head size
        ([(0, 19)], 16, 12, 4, 80),  # three query heads per KV head: 5 rows a tile, 15 vectors
        ([(0, 21), (9, 14)], 8, 8, 4, 24),  # head size 24: 8-lane vectors only (AVX2; AVX-512 builds lack it)
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_kernel_matches_sdpa_over_the_gathered_context(spans, bs, heads, kv_heads, head_dim, dtype):
    cache, meta, q = _step(spans, bs, heads, kv_heads, head_dim, dtype)
    if not cpu_paged_prefill.applies(q, cache, heads):
        pytest.skip(f"head size {head_dim} is not a multiple of this build's vector lanes")
    scale = head_dim**-0.5
    out = cpu_paged_prefill.paged_prefill_cpu(q, cache, meta.prefill_block_tables, meta.prefill_rows, heads, scale)
    torch.testing.assert_close(out, _oracle(q, cache, meta, heads, scale), **_TOLERANCE[dtype])


# A bfloat16 cache is multiplied in bfloat16 (queries and probabilities rounded to it, float32 sums)
# where the CPU has AVX-512 BF16, as flash attention does on GPUs: a bfloat16 model's tolerance.
_TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=2e-5), torch.bfloat16: dict(rtol=1e-2, atol=1e-2)}


@needs_kernel
def test_two_threads_write_what_one_does(monkeypatch):
    cache, meta, q = _step([(0, 300), (0, 200), (50, 120)], 16, 16, 4, 64)
    args = (q, cache, meta.prefill_block_tables, meta.prefill_rows, 16, 0.125)
    monkeypatch.setattr(cpu_paged_prefill, "threads_for", lambda work: 1)
    one = cpu_paged_prefill.paged_prefill_cpu(*args)
    monkeypatch.setattr(cpu_paged_prefill, "threads_for", lambda work: 2)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # with one torch thread the kernel never asks threads_for
    try:
        assert torch.equal(cpu_paged_prefill.paged_prefill_cpu(*args), one)  # each row is one thread's, whole
    finally:
        torch.set_num_threads(threads)


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_step_of_prefills_and_decodes_through_the_layer_matches_the_reference(dtype):
    """Prefills on the prefill kernel, the decodes of the same step on theirs: each row as SDPA has it."""
    cache, meta, q = _step([(0, 40), (63, 1), (12, 20), (5, 1)], 16, 16, 4, 64, dtype)
    layer = Attention(16, 64, 0.125, 4)
    k = v = torch.zeros(0, 4 * 64)
    meta_no_write = type(meta)(**{**meta.__dict__, "slot_mapping": meta.slot_mapping[:0]})
    out = layer(q.to(dtype), k.to(dtype), v.to(dtype), cache, meta_no_write)
    ref = _oracle(q.to(dtype).float(), cache, meta, 16, 0.125)
    torch.testing.assert_close(out.float(), ref, **_TOLERANCE[dtype])


def test_a_head_shape_the_kernel_lacks_or_the_switch_off_keeps_sdpa(monkeypatch):
    cache = torch.zeros(2, 4, 16, 2, 36)  # head size 36: not a multiple of 8 (AVX2's lanes) or 16 (AVX-512's)
    assert not cpu_paged_prefill.applies(torch.zeros(1, 4 * 36), cache, 4)
    assert not cpu_paged_prefill.applies(torch.zeros(1, 4 * 36), cache.to(torch.float16), 4)  # a dtype it lacks
    monkeypatch.setattr(cpu_paged_prefill, "ENABLED", False)  # REFENGINE_CPU_KERNELS=0
    assert not cpu_paged_prefill.applies(torch.zeros(1, 64), torch.zeros(2, 1, 16, 1, 64), 1)
    cache, meta, q = _step([(0, 9)], 16, 4, 2, 36)
    layer = Attention(4, 36, 36**-0.5, 2)
    meta_no_write = type(meta)(**{**meta.__dict__, "slot_mapping": meta.slot_mapping[:0]})
    out = layer(q, torch.zeros(0, 72), torch.zeros(0, 72), cache, meta_no_write)
    torch.testing.assert_close(out, _oracle(q, cache, meta, 4, 36**-0.5))


def test_a_call_splits_by_its_scores_work_not_its_pairs(monkeypatch):
    """The same 512-token prompt is 2^28 of work for `tiny` (16 heads of 64) and 2^24 for tiny-test
    (4 of 16): only the first pays for a second thread beside torch's spinning workers."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    rows = torch.tensor([[0, 512, 0]])
    assert cpu_paged_prefill.threads_for(cpu_paged_prefill.prefill_work(rows, 16, 64)) == 2
    assert cpu_paged_prefill.threads_for(cpu_paged_prefill.prefill_work(rows, 4, 16)) == 1
    two_chunks = torch.tensor([[0, 256, 0], [256, 256, 256]])  # a chunk over its earlier context counts it
    assert cpu_paged_prefill.prefill_work(two_chunks, 1, 1) == 256 * 256 + 256 * 512
