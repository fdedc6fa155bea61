"""The packed CPU linears (model/layers/cpu_gemm.py) against torch.nn.functional.linear.

float32 goes through oneDNN with the weight packed once (checked here to agree with F.linear to
float32 rounding, with and without bias, over decode- and prefill-sized batches reusing one
PackedWeight, on one and two threads), except a single row, which is F.linear's own; bfloat16 too,
one row included, where oneDNN computes it natively (AVX-512 BF16, AMX), else F.linear; float16 is
passed to F.linear as it is.
"""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F

from refengine.model.layers import cpu_gemm

SHAPES = [(64, 96), (128, 128), (250, 64)]  # (in_features, out_features)
BATCHES = [1, 7, 64]
# Relative to the output's magnitude: float32 differs from F.linear only in summation order
# (seen: ~5e-7 of max|y|); the half types are handed to F.linear itself.
TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (1e-3, 1e-3)}


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    old = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(old)


@pytest.fixture(autouse=True)
def packed_gemm_on(request, monkeypatch):
    """The packed path is under test even where REFENGINE_CPU_PACKED_GEMM=0 is set, and for the small
    weights these tests use (the engine leaves float32 weights under MIN_PACKED_FLOAT32 to F.linear;
    a test marked `real_threshold` keeps that), and from two float32 rows whatever this host's
    measured crossover (`plain_float32_rows`, and `plain_widened_bfloat16_rows` for bfloat16 packed in
    float32; their own tests below set them)."""
    monkeypatch.setattr(cpu_gemm, "ENABLED", True)
    monkeypatch.setattr(cpu_gemm, "plain_float32_rows", lambda: 1)
    monkeypatch.setattr(cpu_gemm, "plain_widened_bfloat16_rows", lambda: 1)
    monkeypatch.setattr(cpu_gemm, "plain_float32_from_rows", lambda: sys.maxsize)
    if "real_threshold" not in request.keywords:
        monkeypatch.setattr(cpu_gemm, "MIN_PACKED_FLOAT32", 0)


def _assert_close(got, want, dtype):
    rtol, atol = TOL[dtype]
    scale = max(1.0, float(want.detach().float().abs().max()))
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol * scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("in_f,out_f", SHAPES)
def test_linear_matches_f_linear(in_f, out_f, with_bias, dtype, threads):
    g = torch.Generator().manual_seed(in_f * 1000 + out_f)
    weight = torch.randn(out_f, in_f, generator=g).to(dtype)
    bias = torch.randn(out_f, generator=g).to(dtype) if with_bias else None
    cache = cpu_gemm.PackedWeight()
    packed = None
    with torch.no_grad():  # the engine runs without autograd; the packed path needs that
        for batch in BATCHES:  # one PackedWeight across calls, as a layer keeps it
            x = torch.randn(batch, in_f, generator=g).to(dtype)
            got = cpu_gemm.linear(x, weight, bias, cache)
            assert got.shape == (batch, out_f) and got.dtype == dtype
            _assert_close(got, F.linear(x, weight, bias), dtype)
            packable = cpu_gemm.packs(dtype) and cpu_gemm._ops_available()
            # one row: packed only where the weight is packed in its own bfloat16 (see the fixture)
            if packable and (batch > 1 or cpu_gemm.packed_dtype(dtype) == dtype == torch.bfloat16):
                assert cache.packed is not None  # the packed path ran, not F.linear
                packed = packed if packed is not None else cache.packed
                assert cache.packed is packed  # packed once, reused
            elif not packable:
                assert cache.key is None  # F.linear, nothing packed
        x = torch.randn(2, 3, in_f, generator=g).to(dtype)  # any leading dims
        _assert_close(cpu_gemm.linear(x, weight, bias, cache), F.linear(x, weight, bias), dtype)


def test_replaced_weight_is_repacked():
    """A new weight tensor (a reload, tie_to) behind the same PackedWeight is packed afresh, not served stale."""
    g = torch.Generator().manual_seed(1)
    old, new = torch.randn(96, 64, generator=g), torch.randn(96, 64, generator=g)
    x = torch.randn(7, 64, generator=g)
    cache = cpu_gemm.PackedWeight()
    with torch.no_grad():
        _assert_close(cpu_gemm.linear(x, old, None, cache), F.linear(x, old), torch.float32)
        _assert_close(cpu_gemm.linear(x, new, None, cache), F.linear(x, new), torch.float32)


def test_with_autograd_it_is_f_linear():
    """Outside no_grad (training, a test computing gradients) the call is F.linear and differentiable."""
    g = torch.Generator().manual_seed(2)
    weight = torch.randn(96, 64, generator=g, requires_grad=True)
    x = torch.randn(7, 64, generator=g)
    cache = cpu_gemm.PackedWeight()
    got = cpu_gemm.linear(x, weight, None, cache)
    _assert_close(got, F.linear(x, weight), torch.float32)
    got.sum().backward()
    torch.testing.assert_close(weight.grad, x.sum(0).expand(96, 64))
    assert cache.key is None


@pytest.mark.parametrize("shape", [(1, 64), (1, 1, 64)], ids=["2d", "3d"])
def test_one_row_is_f_linear_and_packs_nothing(shape, threads):
    """A lone decode's single row goes to F.linear (MKL's sgemm on the plain weight is faster there than
    the packed path): F.linear's very numbers, nothing packed for it; the next multi-row call packs."""
    g = torch.Generator().manual_seed(3)
    weight, bias = torch.randn(96, 64, generator=g), torch.randn(96, generator=g)
    cache = cpu_gemm.PackedWeight()
    with torch.no_grad():
        x = torch.randn(*shape, generator=g)
        assert torch.equal(cpu_gemm.linear(x, weight, bias, cache), F.linear(x, weight, bias))
        assert cache.key is None
        rows = torch.randn(2, 64, generator=g)
        _assert_close(cpu_gemm.linear(rows, weight, bias, cache), F.linear(rows, weight, bias), torch.float32)
        assert cache.key is not None


def test_a_few_float32_rows_follow_the_measured_crossover(monkeypatch):
    """Where this process measured F.linear faster up to 3 rows, 2 and 3 rows are F.linear's very
    numbers with nothing packed, and 4 rows are packed."""
    monkeypatch.setattr(cpu_gemm, "plain_float32_rows", lambda: 3)
    g = torch.Generator().manual_seed(5)
    weight = torch.randn(96, 64, generator=g)
    cache = cpu_gemm.PackedWeight()
    with torch.no_grad():
        for rows in (2, 3):
            x = torch.randn(rows, 64, generator=g)
            assert torch.equal(cpu_gemm.linear(x, weight, None, cache), F.linear(x, weight))
            assert cache.key is None
        x = torch.randn(4, 64, generator=g)
        _assert_close(cpu_gemm.linear(x, weight, None, cache), F.linear(x, weight), torch.float32)
        assert cache.key is not None


def test_the_measured_crossover_is_within_the_probed_rows(monkeypatch):
    """The real probe answers 0 to _PROBE_MAX_ROWS (which, depends on the host: one row included, since
    the packed path won at one row on an AVX-512 EPYC); switched off, every probed row count is F.linear's."""
    assert 0 <= cpu_gemm.measure_plain_float32_rows() <= cpu_gemm._PROBE_MAX_ROWS
    monkeypatch.setattr(cpu_gemm, "ENABLED", False)
    assert cpu_gemm.measure_plain_float32_rows() == cpu_gemm._PROBE_MAX_ROWS


def test_the_many_row_crossover_is_a_probed_count_or_none(monkeypatch):
    """The real probe answers one of the probed row counts or "never" (sys.maxsize), which depends on
    the host (F.linear won from 128-512 rows on an AVX2 EPYC, never on AVX-512 and AMX hosts);
    switched off, never."""
    assert cpu_gemm.measure_plain_float32_from_rows() in (*cpu_gemm._MANY_ROWS, sys.maxsize)
    monkeypatch.setattr(cpu_gemm, "ENABLED", False)
    assert cpu_gemm.measure_plain_float32_from_rows() == sys.maxsize


def test_from_the_many_row_crossover_float32_goes_back_to_f_linear(monkeypatch):
    """Where F.linear wins again at many rows, those rows get F.linear's very numbers; fewer rows stay
    packed, and bfloat16 (which F.linear computes no faster at any count) is untouched."""
    monkeypatch.setattr(cpu_gemm, "plain_float32_from_rows", lambda: 32)
    g = torch.Generator().manual_seed(8)
    weight = torch.randn(96, 64, generator=g)
    cache = cpu_gemm.PackedWeight()
    with torch.no_grad():
        x = torch.randn(40, 64, generator=g)
        assert torch.equal(cpu_gemm.linear(x, weight, None, cache), F.linear(x, weight))
        assert cache.key is None
        x = torch.randn(8, 64, generator=g)
        _assert_close(cpu_gemm.linear(x, weight, None, cache), F.linear(x, weight), torch.float32)
        assert cache.packed is not None


def test_where_the_packed_path_wins_at_one_row_a_lone_row_is_packed(monkeypatch):
    monkeypatch.setattr(cpu_gemm, "plain_float32_rows", lambda: 0)
    g = torch.Generator().manual_seed(6)
    weight = torch.randn(96, 64, generator=g)
    cache = cpu_gemm.PackedWeight()
    with torch.no_grad():
        x = torch.randn(1, 64, generator=g)
        _assert_close(cpu_gemm.linear(x, weight, None, cache), F.linear(x, weight), torch.float32)
        assert cache.key is not None


@pytest.mark.parametrize("with_bias", [False, True], ids=["nobias", "bias"])
def test_bfloat16_without_native_support_is_packed_in_float32(monkeypatch, with_bias):
    """An AVX2 host has no bfloat16 arithmetic (F.linear converts, one row at a time): the weight is
    packed widened to float32, bfloat16 rows go through it, and the result is bfloat16, F.linear's
    up to float32 summation order and one rounding; a lone row stays with F.linear (the fixture's
    crossover)."""
    monkeypatch.setattr(cpu_gemm.cpu_bfloat16, "cpu_computes_bfloat16", lambda: False)
    g = torch.Generator().manual_seed(2)
    weight = torch.randn(96, 64, generator=g).bfloat16()
    bias = torch.randn(96, generator=g).bfloat16() if with_bias else None
    cache = cpu_gemm.PackedWeight()
    with torch.no_grad():
        x = torch.randn(1, 64, generator=g).bfloat16()
        assert torch.equal(cpu_gemm.linear(x, weight, bias, cache), F.linear(x, weight, bias))
        assert cache.key is None  # nothing packed for one row
        for rows in (2, 7, 64):
            x = torch.randn(rows, 64, generator=g).bfloat16()
            got = cpu_gemm.linear(x, weight, bias, cache)
            assert got.dtype == torch.bfloat16
            _assert_close(got, F.linear(x, weight, bias), torch.bfloat16)
            # exactly the float32 product of the same bfloat16 values, rounded once
            want = F.linear(x.float(), weight.float(), None if bias is None else bias.float()).bfloat16()
            torch.testing.assert_close(got, want, rtol=8e-3, atol=1e-5)
    assert cache.packed is not None and cache.packed.dtype == torch.float32
    assert cpu_gemm.packed_dtype(torch.bfloat16) == torch.float32 and cpu_gemm.packs(torch.bfloat16)


@pytest.mark.real_threshold
def test_a_small_float32_weight_stays_with_f_linear_and_a_bfloat16_one_is_packed():
    """Under MIN_PACKED_FLOAT32 elements oneDNN's call costs more than the product: F.linear's very
    numbers and nothing packed, at every row count; bfloat16 (natively computed) is packed at any size."""
    g = torch.Generator().manual_seed(4)
    weight = torch.randn(176, 64, generator=g)
    assert weight.numel() < cpu_gemm.MIN_PACKED_FLOAT32
    cache = cpu_gemm.PackedWeight()
    with torch.no_grad():
        for rows in (2, 16, 64):
            x = torch.randn(rows, 64, generator=g)
            assert torch.equal(cpu_gemm.linear(x, weight, None, cache), F.linear(x, weight))
            assert cache.packed is None
        # natively computed bfloat16 is packed at any size; packed in float32, the float32 rule holds
        if cpu_gemm.packed_dtype(torch.bfloat16) == torch.bfloat16 and cpu_gemm._ops_available():
            half = cpu_gemm.PackedWeight()
            cpu_gemm.linear(torch.randn(4, 64, generator=g).bfloat16(), weight.bfloat16(), None, half)
            assert half.packed is not None
