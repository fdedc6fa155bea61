"""The one-row bfloat16 GEMV kernel (refengine/kernels/cpu_gemv.py) against F.linear in float32."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from refengine.kernels import cpu_gemv
from refengine.model.layers import cpu_gemm

needs_kernel = pytest.mark.skipif(
    not (cpu_gemv.HAS_BF16_DOT and cpu_gemv.ENABLED and cpu_gemv.LIBRARY.available()),
    reason="the GEMV kernel needs a CPU with AVX-512 BF16 and a C++ compiler",
)


def _bf16(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


@needs_kernel
@pytest.mark.parametrize("n,k", [(4096, 1024), (1024, 2816), (1537, 64), (3, 32)])
def test_one_row_matches_the_float32_product_to_bfloat16_rounding(n, k):
    x, w = _bf16(1, k, seed=1), _bf16(n, k, seed=2)
    assert cpu_gemv.applies(x, w)
    got = cpu_gemv.linear_one_row(x, w, None)
    want = F.linear(x.float(), w.float())
    assert got.dtype == torch.bfloat16 and got.shape == (1, n)
    # float32 sums in another order, then one rounding to bfloat16 (8 bits: 2^-8 relative)
    assert torch.allclose(got.float(), want, rtol=2**-7, atol=1e-3 * float(want.abs().max()))


@needs_kernel
def test_leading_dims_and_a_bias_are_kept():
    x, w, b = _bf16(1, 1, 64, seed=3), _bf16(48, 64, seed=4), _bf16(48, seed=5)
    got = cpu_gemv.linear_one_row(x, w, b)
    want = F.linear(x.float(), w.float(), b.float())
    assert got.shape == (1, 1, 48)
    assert torch.allclose(got.float(), want, rtol=2**-6, atol=1e-2)


def test_it_takes_only_one_bfloat16_row_of_a_multiple_of_32():
    w = _bf16(64, 64)
    assert not cpu_gemv.applies(_bf16(2, 64), w)  # two rows: oneDNN's blocked kernels
    assert not cpu_gemv.applies(_bf16(1, 48), _bf16(64, 48))  # not a multiple of 32
    assert not cpu_gemv.applies(torch.randn(1, 64), w.float())  # float32
    assert not cpu_gemv.applies(_bf16(1, 64), _bf16(64, 128)[:, :64])  # a non-contiguous weight


@needs_kernel
def test_the_layers_linear_takes_the_kernel_for_one_row_and_agrees_with_itself_off():
    x, w = _bf16(1, 1024, seed=6), _bf16(1536, 1024, seed=7)
    with torch.inference_mode():
        on = cpu_gemm.linear(x, w, None, cpu_gemm.PackedWeight())
    cpu_gemv.ENABLED = False
    try:
        with torch.inference_mode():
            off = cpu_gemm.linear(x, w, None, cpu_gemm.PackedWeight())
    finally:
        cpu_gemv.ENABLED = True
    assert torch.allclose(on.float(), off.float(), rtol=2**-7, atol=1e-3 * float(off.float().abs().max()))
