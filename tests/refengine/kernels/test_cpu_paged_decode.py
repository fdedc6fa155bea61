"""The CPU paged decode kernel (kernels/cpu_paged_decode.py) against the PyTorch oracle.

Covered: ragged contexts, a one-token context, a context ending exactly on a block boundary,
shuffled block tables, GQA / MQA / MHA, block sizes 1, 4 and 16, one and two threads, a step
mixing decodes and prefills through the Attention layer, the build cache keyed by the CPU's
instruction-set flags (an object built for another CPU is never loaded), and the clean fallback
when the kernel cannot be built or is switched off. The fallback tests simulate the missing or
broken compiler, so they run on every machine; the kernel's own tests need a C++ compiler.
"""

from __future__ import annotations

import logging
import os
import platform
import random
import shutil

import pytest
import torch

from refengine.attention.metadata import build_attention_metadata
from refengine.attention.reference import paged_attention, store_kv
from refengine.kernels import cpu_build, cpu_paged_decode
from refengine.model.layers.attention import Attention

needs_compiler = pytest.mark.skipif(not cpu_paged_decode.available(), reason="no C++ compiler here")


def _clear_caches():
    cpu_paged_decode.LIBRARY.forget()


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """An empty kernel cache under tmp_path and nothing built or judged yet in this process. The
    lru_caches are cleared again afterwards (before monkeypatch restores the environment), so later
    tests build or load the kernel for the real cache and CPU, not this test's."""
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path))
    _clear_caches()
    yield tmp_path
    _clear_caches()


def _case(lengths, bs, heads, kv_heads, head_dim, seed=0, dtype=torch.float32):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-n // bs) for n in lengths) + 3
    cache = torch.zeros(2, num_blocks, bs, kv_heads, head_dim)
    free = list(range(num_blocks))
    rng.shuffle(free)
    seqs = [(n - 1, 1, [free.pop() for _ in range(-(-n // bs))]) for n in lengths]
    fill = build_attention_metadata([(0, n, ids) for n, (_, _, ids) in zip(lengths, seqs)], bs)
    total = sum(lengths)
    store_kv(
        torch.randn(total, kv_heads * head_dim, generator=g),
        torch.randn(total, kv_heads * head_dim, generator=g),
        cache,
        fill.slot_mapping,
    )
    q = torch.randn(len(lengths), heads * head_dim, generator=g)
    return q, cache.to(dtype), build_attention_metadata(seqs, bs)


@needs_compiler
@pytest.mark.parametrize("heads,kv_heads", [(16, 4), (4, 1), (4, 4)])
@pytest.mark.parametrize("bs", [1, 4, 16, 32])
@pytest.mark.parametrize("threads", [1, 2])
# 32: the vector body where the CPU has AVX-512 (16 lanes) or AVX2 (8); 20: the portable one on either
@pytest.mark.parametrize("head_dim", [32, 20])
def test_kernel_matches_reference(heads, kv_heads, bs, threads, head_dim, monkeypatch):
    # Every byte of context earns a thread here, so two threads do split the sequences.
    monkeypatch.setattr(cpu_paged_decode, "MIN_BYTES_PER_THREAD", 1)
    lengths = [1, 5, 16, 17, 64, 3, 100, 33]
    q, cache, meta = _case(lengths, bs, heads, kv_heads, head_dim)
    want = paged_attention(q, cache, meta, heads, 0.17)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        got = cpu_paged_decode.paged_decode_cpu(q, cache, meta.block_tables, meta.seq_lens, heads, 0.17)
    finally:
        torch.set_num_threads(old)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_asking_for_the_next_tile_ahead_changes_no_output(dtype, monkeypatch):
    """The prefetch only moves memory (the next tile's rows, the next sequence's none): the same
    bits with it and without, across tile and sequence ends and scattered blocks."""
    q, cache, meta = _case([1, 15, 16, 17, 33, 270], 16, 16, 4, 64, seed=3, dtype=dtype)
    outs = []
    for on in (True, False):
        monkeypatch.setattr(cpu_paged_decode, "PREFETCH", on)
        outs.append(cpu_paged_decode.paged_decode_cpu(q, cache, meta.block_tables, meta.seq_lens, 16, 0.125))
    assert torch.equal(outs[0], outs[1])
    torch.testing.assert_close(outs[0], paged_attention(q, cache, meta, 16, 0.125), atol=2e-5, rtol=2e-5)


@needs_compiler
@pytest.mark.parametrize("head_dim", [16, 24, 48, 64, 120, 128, 144])
@pytest.mark.parametrize("bs", [1, 16, 32])
def test_every_head_size_and_tile_boundary_matches_reference(head_dim, bs):
    """Head sizes of one to eight 16-lane vectors (AVX-512) or to sixteen 8-lane ones (AVX2; 24 and
    120 are 8-lane sizes only), the vector body compiled per count, one beyond (144: the portable
    body); contexts ending on, just before and just after a tile of either width, blocks smaller and
    larger than a tile."""
    lengths = [1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 130]
    q, cache, meta = _case(lengths, bs, 8, 2, head_dim, seed=head_dim + bs)
    want = paged_attention(q, cache, meta, 8, head_dim**-0.5)
    got = cpu_paged_decode.paged_decode_cpu(q, cache, meta.block_tables, meta.seq_lens, 8, head_dim**-0.5)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@needs_compiler
@pytest.mark.parametrize("head_dim", [64, 20])
def test_bfloat16_cache_matches_float32_math_on_the_same_values(head_dim):
    """A bfloat16 cache is read as the float32 values it holds (widening is exact), so the kernel
    agrees with the float32 oracle run on the widened cache and a float32 query, to float32
    rounding; the oracle on the bfloat16 cache itself computes in bfloat16 and is further off."""
    lengths = [1, 15, 16, 17, 90, 200]
    q, cache, meta = _case(lengths, 16, 16, 4, head_dim, seed=4, dtype=torch.bfloat16)
    want = paged_attention(q, cache.float(), meta, 16, head_dim**-0.5)
    got = cpu_paged_decode.paged_decode_cpu(q, cache, meta.block_tables, meta.seq_lens, 16, head_dim**-0.5)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # and through the layer, with a bfloat16 query as the model has it
    coarse = paged_attention(q.bfloat16(), cache, meta, 16, head_dim**-0.5).float()
    torch.testing.assert_close(got, coarse, atol=2e-2, rtol=2e-2)


@needs_compiler
def test_large_scores_do_not_overflow_the_exponential():
    """Scores of several hundred (a large query against large keys) and a spread far beyond exp's
    float32 range: the online softmax subtracts the running max, so the kernel stays finite and
    matches the oracle (whose softmax is exact)."""
    q, cache, meta = _case([40, 70], 16, 4, 2, 32, seed=9)
    cache[0, :, :, 0] *= 30.0  # KV head 0's keys: scores up to ~±600
    want = paged_attention(q * 3, cache, meta, 4, 1.0)
    got = cpu_paged_decode.paged_decode_cpu(q * 3, cache, meta.block_tables, meta.seq_lens, 4, 1.0)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_a_call_splits_over_threads_only_for_enough_context(monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    per = cpu_paged_decode.MIN_BYTES_PER_THREAD
    assert [cpu_paged_decode.threads_for(b) for b in (0, per - 1, per, 3 * per, 100 * per)] == [1, 1, 1, 3, 4]


@needs_compiler
def test_mixed_step_through_the_layer_matches_reference():
    """Decodes on the kernel, the prefill chunk (after a cached prefix) on the reference, one step."""
    bs, heads, kv_heads, d = 4, 8, 2, 16
    g = torch.Generator().manual_seed(3)
    cache = torch.zeros(2, 40, bs, kv_heads, d)
    prior = build_attention_metadata([(0, 9, [5, 6, 7]), (0, 6, [1, 2]), (0, 4, [10])], bs)
    store_kv(
        torch.randn(19, kv_heads * d, generator=g),
        torch.randn(19, kv_heads * d, generator=g),
        cache,
        prior.slot_mapping,
    )
    # seq 0 decodes at 9, seq 1 prefills 5 more tokens from 6, seq 2 decodes at 4.
    meta = build_attention_metadata([(9, 1, [5, 6, 7]), (6, 5, [1, 2, 3]), (4, 1, [10, 11])], bs)
    q = torch.randn(7, heads * d, generator=g)
    k, v = torch.randn(7, kv_heads * d, generator=g), torch.randn(7, kv_heads * d, generator=g)
    layer = Attention(heads, d, d**-0.5, kv_heads)
    ref_cache = cache.clone()
    store_kv(k, v, ref_cache, meta.slot_mapping)
    want = paged_attention(q, ref_cache, meta, heads, d**-0.5)
    got = layer(q, k, v, cache, meta)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cache, ref_cache)


def test_cache_key_follows_the_cpu_flags(monkeypatch):
    """The object's name changes with the CPU's flag set, and only with the set (not its order)."""
    if os.path.exists("/proc/cpuinfo") and platform.machine() == "x86_64":
        assert "sse2" in cpu_build.cpu_flags()  # the real flags line was read (all x86-64 have SSE2)

    def path_for(flags):
        monkeypatch.setattr(cpu_build, "cpu_flags", lambda: flags)
        return cpu_paged_decode.LIBRARY.path(), cpu_paged_decode.LIBRARY.key()

    here = path_for(["fpu", "sse2", "avx2", "fma"])
    assert path_for(["fpu", "sse2", "avx2", "fma"]) == here
    assert path_for(["fma", "avx2", "sse2", "fpu", "avx2"]) == here  # same set, other order
    assert path_for(["fpu", "sse2", "avx2", "fma", "avx512f"])[0] != here[0]
    assert path_for(["fpu", "sse2"])[0] != here[0]
    assert "cpu flags: avx2 fma fpu sse2\n" in here[1]


@pytest.mark.slow  # moved out of the default suite (its 10-minute budget); .ci/run runs it
@needs_compiler
def test_object_built_for_another_cpu_is_not_loaded(monkeypatch, fresh_build):
    """A shared cache holding an object built for another CPU (here: this CPU's flags with AVX-512
    toggled): this CPU builds and loads its own. The foreign file is junk, so loading it would make
    available() False; a real one would kill the process with SIGILL."""
    here = cpu_build.cpu_flags()
    monkeypatch.setattr(cpu_build, "cpu_flags", lambda: sorted(set(here) ^ {"avx512f"}))
    foreign = cpu_paged_decode.LIBRARY.path()
    foreign.parent.mkdir(parents=True)
    foreign.write_bytes(b"built for another CPU")
    monkeypatch.setattr(cpu_build, "cpu_flags", lambda: here)
    assert cpu_paged_decode.available()
    lib = cpu_paged_decode.LIBRARY.path()
    assert lib != foreign and lib.exists()
    assert foreign.read_bytes() == b"built for another CPU"
    assert sorted(p.name for p in fresh_build.joinpath("kernels").iterdir()) == sorted(
        [foreign.name, lib.name, lib.with_suffix(".txt").name]
    )
    note = lib.with_suffix(".txt").read_text()  # what it was built for, for a human
    assert note == cpu_paged_decode.LIBRARY.key() and f"cpu flags: {' '.join(sorted(set(here)))}\n" in note
    q, cache, meta = _case([7, 20], 4, 4, 2, 16)
    got = cpu_paged_decode.paged_decode_cpu(q, cache, meta.block_tables, meta.seq_lens, 4, 0.25)
    torch.testing.assert_close(got, paged_attention(q, cache, meta, 4, 0.25), atol=1e-5, rtol=1e-5)


def test_switched_off_falls_back(monkeypatch):
    q, cache, _ = _case([7, 20], 4, 4, 2, 16)
    monkeypatch.setattr(cpu_paged_decode, "ENABLED", False)
    assert not cpu_paged_decode.applies(q, cache)
    monkeypatch.setattr(cpu_paged_decode, "ENABLED", True)
    assert cpu_paged_decode.applies(q, cache.to(torch.bfloat16)) == cpu_paged_decode.available()
    assert not cpu_paged_decode.applies(q, cache.to(torch.float16))  # float32 and bfloat16 caches only


@pytest.mark.parametrize("compiler,reason", [(None, "no C++ compiler"), ("/bin/false", "CalledProcessError")])
def test_unbuildable_falls_back_to_pytorch(monkeypatch, fresh_build, caplog, compiler, reason):
    """No compiler on PATH, or one that fails: available() is False with the reason logged, nothing
    raises, and the layer's decodes run on the PyTorch path with the oracle's result."""
    if compiler is None:
        monkeypatch.delenv("CXX", raising=False)
        monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    else:
        monkeypatch.setenv("CXX", compiler)
    monkeypatch.setattr(cpu_paged_decode, "ENABLED", True)
    with caplog.at_level(logging.WARNING, logger=cpu_build.log.name):
        assert not cpu_paged_decode.available()
    assert any(
        "CPU paged decode kernel unavailable" in r.getMessage()
        and reason in r.getMessage()
        and "using the PyTorch path" in r.getMessage()
        for r in caplog.records
    )
    assert not list(fresh_build.joinpath("kernels").glob("*.so"))

    def no_kernel(*args, **kwargs):
        raise AssertionError("the kernel ran though it is unavailable")

    monkeypatch.setattr(cpu_paged_decode, "paged_decode_cpu", no_kernel)
    bs, heads, kv_heads, d = 4, 4, 2, 16
    g = torch.Generator().manual_seed(5)
    cache = torch.zeros(2, 12, bs, kv_heads, d)
    prior = build_attention_metadata([(0, 7, [3, 8]), (0, 20, [0, 1, 2, 4, 5])], bs)
    store_kv(
        torch.randn(27, kv_heads * d, generator=g),
        torch.randn(27, kv_heads * d, generator=g),
        cache,
        prior.slot_mapping,
    )
    meta = build_attention_metadata([(7, 1, [3, 8]), (20, 1, [0, 1, 2, 4, 5, 6])], bs)
    q = torch.randn(2, heads * d, generator=g)
    k, v = torch.randn(2, kv_heads * d, generator=g), torch.randn(2, kv_heads * d, generator=g)
    ref_cache = cache.clone()
    store_kv(k, v, ref_cache, meta.slot_mapping)
    want = paged_attention(q, ref_cache, meta, heads, d**-0.5)
    got = Attention(heads, d, d**-0.5, kv_heads)(q, k, v, cache, meta)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
