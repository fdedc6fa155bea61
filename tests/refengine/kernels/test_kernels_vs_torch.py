"""Triton kernels against the PyTorch oracle (layers/attention.py, numerics/fp8.py).

On CPU they run under TRITON_INTERPRET=1 (tests/refengine/kernels/conftest.py), so shapes are small;
on a GPU the same tests run the compiled kernels. Covered: ragged sequence lengths, a context
ending exactly on a block boundary, a partially filled last block, a one-token context,
shuffled (non-contiguous) block tables, GQA and MHA, split-K, FP8 caches with scales, bfloat16.
"""

from __future__ import annotations

import random

import pytest
import torch

from refengine.attention.metadata import build_attention_metadata
from refengine.attention.reference import paged_attention, store_kv
from refengine.model.layers.attention import allocate_kv_caches
from refengine.numerics.fp8 import FP8_DTYPE, dequantize, quantize

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class Cfg:
    num_hidden_layers = 1

    def __init__(self, kv_heads, head_dim):
        self.num_key_value_heads, self.head_dim = kv_heads, head_dim


def _decode_case(lengths, bs, heads, kv_heads, head_dim, cache_dtype, q_dtype=torch.float32, seed=0, scale=1.0):
    """A filled cache and decode metadata for sequences whose contexts (new token included) are `lengths`."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-n // bs) for n in lengths) + 2
    cache = allocate_kv_caches(Cfg(kv_heads, head_dim), num_blocks, bs, cache_dtype, DEVICE)[0]
    free = list(range(num_blocks))
    rng.shuffle(free)
    seqs = [(n - 1, 1, [free.pop() for _ in range(-(-n // bs))]) for n in lengths]
    fill = build_attention_metadata([(0, n, ids) for n, (_, _, ids) in zip(lengths, seqs)], bs, DEVICE)
    k = (torch.randn(fill.num_tokens, kv_heads * head_dim, generator=g) * scale).to(DEVICE)
    v = (torch.randn(fill.num_tokens, kv_heads * head_dim, generator=g) * scale).to(DEVICE)
    store_kv(k, v, cache, fill.slot_mapping, scale, scale)
    meta = build_attention_metadata(seqs, bs, DEVICE)
    q = torch.randn(len(lengths), heads * head_dim, generator=g).to(DEVICE, q_dtype)
    return q, cache, meta


CASES = {
    # lengths: 1 token, a partial last block, exactly two blocks, several blocks with a partial tail
    "gqa": dict(lengths=[1, 5, 8, 13], bs=4, heads=4, kv_heads=2, head_dim=16),
    "mha_odd_head_dim": dict(lengths=[3, 7], bs=4, heads=2, kv_heads=2, head_dim=24),
    "group4_block8": dict(lengths=[9, 16, 2], bs=8, heads=8, kv_heads=2, head_dim=8),
    # past one 64-token tile: a tile boundary exactly at 64, one token over, and three tiles
    "multi_tile": dict(lengths=[64, 65, 150, 1], bs=8, heads=4, kv_heads=2, head_dim=16),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("num_splits", [1, 3])
def test_paged_decode_matches_oracle(case, num_splits):
    from refengine.kernels.paged_decode import paged_decode_attention

    c = CASES[case]
    q, cache, meta = _decode_case(c["lengths"], c["bs"], c["heads"], c["kv_heads"], c["head_dim"], torch.float32)
    scale = c["head_dim"] ** -0.5
    want = paged_attention(q, cache, meta, c["heads"], scale)
    got = paged_decode_attention(q, cache, meta.block_tables, meta.seq_lens, c["heads"], scale, num_splits=num_splits)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_split_k_more_splits_than_a_short_sequence_has_blocks():
    from refengine.kernels.paged_decode import paged_decode_attention

    # 200 tokens = 4 tiles, one split each: the 2-token sequence leaves three splits empty
    q, cache, meta = _decode_case([2, 200], bs=4, heads=2, kv_heads=1, head_dim=8, cache_dtype=torch.float32)
    want = paged_attention(q, cache, meta, 2, 0.3)
    got = paged_decode_attention(q, cache, meta.block_tables, meta.seq_lens, 2, 0.3, num_splits=4)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_paged_decode_fp8_cache_with_scales():
    from refengine.kernels.paged_decode import paged_decode_attention

    s = 0.02
    q, cache, meta = _decode_case([6, 100], bs=4, heads=4, kv_heads=2, head_dim=16, cache_dtype=FP8_DTYPE, scale=s * 30)
    assert cache.dtype == FP8_DTYPE
    want = paged_attention(q, cache, meta, 4, 0.25, s * 30, s * 30)
    got = paged_decode_attention(q, cache, meta.block_tables, meta.seq_lens, 4, 0.25, s * 30, s * 30, num_splits=2)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_paged_decode_bfloat16():
    from refengine.kernels.paged_decode import paged_decode_attention

    q, cache, meta = _decode_case(
        [5, 9], bs=4, heads=2, kv_heads=1, head_dim=16, cache_dtype=torch.bfloat16, q_dtype=torch.bfloat16
    )
    want = paged_attention(q.float(), cache, meta, 2, 0.25)
    got = paged_decode_attention(q, cache, meta.block_tables, meta.seq_lens, 2, 0.25)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("cache_dtype", [torch.float32, FP8_DTYPE])
def test_kv_store_matches_oracle(cache_dtype):
    from refengine.kernels.kv_store import store_kv_triton

    kv_heads, head_dim, bs, nb = 2, 12, 4, 5
    caches = [allocate_kv_caches(Cfg(kv_heads, head_dim), nb, bs, cache_dtype, DEVICE)[0] for _ in range(2)]
    g = torch.Generator().manual_seed(0)
    k = (torch.randn(6, kv_heads * head_dim, generator=g) * 3).to(DEVICE)
    v = (torch.randn(6, kv_heads * head_dim, generator=g) * 3).to(DEVICE)
    k[0, 0] = 1e5  # saturates in FP8 instead of becoming NaN
    slots = torch.tensor([0, 19, 4, 7, 8, 3], device=DEVICE)
    store_kv(k, v, caches[0], slots, 0.5, 2.0)
    store_kv_triton(k, v, caches[1], slots, 0.5, 2.0)
    if cache_dtype == FP8_DTYPE and DEVICE == "cpu":
        # Triton 3.9's interpreter casts float -> e4m3 wrongly when rounding carries into the
        # exponent (1.97 -> 1.0 instead of 2.0; ties round up): a GPU casts in hardware (RNE,
        # checked exactly below). Here: the same except for a few such values, off by <= 2x.
        a, b = caches[0].float(), caches[1].float()
        assert torch.isfinite(b).all() and float(b.abs().max()) == 448.0
        bad = a != b
        assert bad.float().mean() < 0.05
        assert bool(((b[bad].abs() >= a[bad].abs() / 2) & (b[bad].abs() <= a[bad].abs() * 2)).all())
    else:
        assert torch.equal(caches[0].view(torch.uint8), caches[1].view(torch.uint8))
    # a negative slot is padding: nothing is written
    before = caches[1].clone()
    store_kv_triton(k[:1], v[:1], caches[1], torch.tensor([-1], device=DEVICE))
    assert torch.equal(before.view(torch.uint8), caches[1].view(torch.uint8))


@pytest.mark.parametrize("kind,block", [("tensor", 128), ("channel", 128), ("block", 16)])
def test_fp8_dequant_matches_oracle(kind, block):
    from refengine.kernels.fp8_dequant import fp8_dequantize_triton
    from refengine.numerics.fp8 import quantize_blocks

    w = torch.randn(40, 72)
    w8, scale = quantize_blocks(w, block) if kind == "block" else quantize(w, kind)
    want = dequantize(w8, scale, torch.float32, block)
    got = fp8_dequantize_triton(w8.to(DEVICE), scale.to(DEVICE), torch.float32, block)
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)


def test_dispatch_runs_decode_and_mixed_steps_like_the_torch_path():
    """attention_with_kernels (what Attention.forward calls on a GPU) against the PyTorch path."""
    from refengine.kernels.dispatch import attention_with_kernels, choose_num_splits
    from refengine.model.layers.attention import Attention

    layer = Attention(num_heads=4, head_dim=16, scale=0.25, num_kv_heads=2)
    layer.k_scale = layer.v_scale = 0.05
    g = torch.Generator().manual_seed(3)
    for cache_dtype in (torch.float32, FP8_DTYPE):
        caches = [allocate_kv_caches(Cfg(2, 16), 12, 4, cache_dtype, DEVICE)[0] for _ in range(2)]
        steps = [
            [(0, 6, [3, 7]), (0, 3, [1])],  # two prefills
            [(6, 1, [3, 7]), (3, 1, [1])],  # a decode-only step (the Triton decode kernel)
            [(7, 1, [3, 7]), (4, 3, [1, 9])],
        ]  # a decode mixed with a prefill chunk
        for seqs in steps:
            meta = build_attention_metadata(seqs, 4, DEVICE)
            q = torch.randn(meta.num_tokens, 64, generator=g).to(DEVICE)
            k = torch.randn(meta.num_tokens, 32, generator=g).to(DEVICE)
            v = torch.randn(meta.num_tokens, 32, generator=g).to(DEVICE)
            got = attention_with_kernels(layer, q, k, v, caches[1], meta)
            # the oracle on the cache the kernel wrote (the store itself is checked above; the
            # interpreter's FP8 cast differs from PyTorch's on a few values)
            torch.testing.assert_close(
                got, paged_attention(q, caches[1], meta, 4, 0.25, 0.05, 0.05), rtol=1e-4, atol=1e-5
            )
            if cache_dtype == torch.float32 and DEVICE == "cpu":  # the whole step, store included
                torch.testing.assert_close(got, layer(q, k, v, caches[0], meta), rtol=1e-4, atol=1e-5)
    assert choose_num_splits(64, 8, 8192, torch.device("cpu")) == 1  # enough programs already
    assert choose_num_splits(1, 8, 512, torch.device("cpu")) == 1  # short context
    assert choose_num_splits(1, 8, 8192, torch.device("cpu")) == 16  # long context, idle SMs


def test_cpu_engine_never_imports_the_kernels():
    """On CPU the engine runs the PyTorch path and must not import (decorate) the Triton kernels: a kernel
    decorated without TRITON_INTERPRET would stay compiled-mode for the whole process."""
    import subprocess
    import sys

    code = (
        "import sys; from refengine import LLM, SamplingParams; "
        "llm = LLM('tiny-test', device='cpu', max_model_len=64, kv_cache_memory_bytes=1 << 20, quantization='fp8', "
        "kv_cache_dtype='fp8'); llm.generate(['hi'], SamplingParams(max_tokens=2)); "
        "print(sorted(m for m in sys.modules if m.startswith('refengine.kernels.') "
        "and not m.startswith('refengine.kernels.cpu_')), 'triton' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    # the CPU kernels (refengine.kernels.cpu_*, C++ through ctypes) are the CPU path; no Triton kernel loads
    assert out.stdout.strip() == "[] False"
