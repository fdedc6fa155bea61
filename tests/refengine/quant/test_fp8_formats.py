"""E4M3 quantize/dequantize round trips: error bounds per scale kind, saturation, ragged blocks.

The bound used throughout: E4M3 keeps 3 mantissa bits, so round-to-nearest moves a normal value
by at most 2^-4 of itself; below the smallest normal (2^-6 in scaled units) the step is 2^-9,
so the absolute error there is at most 2^-10 scaled units. Per element:
    |w - dequant(w)| <= 2^-4 |w| + 2^-10 scale
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from refengine.numerics.fp8 import (
    FP8_DTYPE,
    FP8_MAX,
    dequantize,
    expand_block_scale,
    quantize,
    quantize_blocks,
    quantize_per_channel,
    quantize_per_tensor,
    quantize_per_token,
    saturate_to_fp8,
    scale_kind,
)


def _elementwise_scale(scale: torch.Tensor, shape, block=128) -> torch.Tensor:
    kind = scale_kind(scale, tuple(shape))
    if kind == "block":
        return expand_block_scale(scale, tuple(shape), block)
    return scale.expand(shape) if kind == "channel" else scale.reshape(1, 1).expand(shape)


def _check_bound(w, w8, scale, block=128):
    assert w8.dtype == FP8_DTYPE and w8.shape == w.shape
    back = dequantize(w8, scale, torch.float32, block)
    s = _elementwise_scale(scale, w.shape, block)
    bound = 2**-4 * w.abs() + 2**-10 * s + 1e-12
    excess = (w - back).abs() - bound
    assert float(excess.max()) <= 0, f"round-trip error exceeds the E4M3 bound by {float(excess.max()):.3g}"
    assert torch.isfinite(back).all()
    return back


@pytest.mark.parametrize("kind", ["tensor", "channel", "block"])
@pytest.mark.parametrize("shape", [(64, 48), (300, 200), (1, 7)])
def test_round_trip_within_e4m3_bound(kind, shape):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(shape, generator=g) * 0.05
    w8, scale = quantize(w, kind)
    back = _check_bound(w, w8, scale)
    # amax maps onto 448 exactly, so the largest magnitude survives to within one rounding step.
    assert float(back.abs().max()) == pytest.approx(float(w.abs().max()), rel=2**-4)


def test_scale_shapes():
    w = torch.randn(300, 200)
    assert quantize_per_tensor(w)[1].shape == (1,)
    assert quantize_per_channel(w)[1].shape == (300, 1)
    assert quantize_blocks(w)[1].shape == (3, 2)  # ceil(300/128), ceil(200/128)
    assert scale_kind(quantize_blocks(w)[1], (300, 200)) == "block"


def test_per_channel_beats_per_tensor_with_an_outlier_row():
    # E4M3's exponent covers ~2^15, so a 200x outlier costs a shared scale nothing (unlike INT8);
    # a 1e5x one pushes every other row into the subnormals, where per-channel scales still help.
    g = torch.Generator().manual_seed(1)
    w = torch.randn(64, 64, generator=g) * 0.02
    w[3] *= 1e5
    err = {
        k: float((dequantize(*quantize(w, k)) - w)[torch.arange(64) != 3].abs().mean()) for k in ("tensor", "channel")
    }
    assert err["channel"] < err["tensor"] / 10


def test_block_scales_isolate_an_outlier_tile():
    w = torch.randn(256, 256) * 0.02
    w[:128, :128] *= 500.0
    w8, scale = quantize_blocks(w)
    assert scale[0, 0] > 100 * scale[1, 1]
    _check_bound(w, w8, scale)


def test_ragged_block_edges_and_small_block():
    w = torch.randn(37, 45)
    w8, scale = quantize_blocks(w, block=16)
    assert scale.shape == (3, 3)
    _check_bound(w, w8, scale, block=16)


def test_zero_rows_stay_zero_and_finite():
    w = torch.zeros(8, 16)
    w[2] = torch.randn(16)
    for kind in ("tensor", "channel", "block"):
        w8, scale = quantize(w, kind)
        back = dequantize(w8, scale)
        assert torch.isfinite(back).all()
        assert back[0].abs().sum() == 0


def test_saturation_instead_of_nan():
    x = torch.tensor([1e6, -1e6, 449.0, 0.5])
    y = saturate_to_fp8(x).float()
    assert y.tolist() == [FP8_MAX, -FP8_MAX, FP8_MAX, 0.5]


def test_per_token_activation_scales():
    x = torch.randn(5, 32)
    x[2] *= 1000
    x8, s = quantize_per_token(x)
    assert s.shape == (5, 1)
    back = x8.float() * s
    assert float(((back - x).abs() - (2**-4 * x.abs() + 2**-10 * s)).max()) <= 1e-9


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(1, 40),
    cols=st.integers(1, 40),
    log_mag=st.floats(-6, 3),
    kind=st.sampled_from(["tensor", "channel", "block"]),
    seed=st.integers(0, 2**16),
)
def test_round_trip_bound_property(rows, cols, log_mag, kind, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, cols, generator=g) * 10**log_mag
    w8, scale = quantize(w, kind)
    _check_bound(w, w8, scale)
