"""W8A8: FP8 x FP8 GEMM with per-token activation and per-channel weight scales.

The math runs on CPU too (this torch has a CPU torch._scaled_mm), so it is checked here; the
engine selects it only on CUDA sm89+ (gpu-marked tests)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from refengine.numerics.fp8 import dequantize, quantize_per_channel
from refengine.quant.fp8_matmul import w8a8_linear, w8a8_supported


def test_w8a8_math_on_cpu():
    from types import SimpleNamespace

    from refengine.quant.fp8_matmul import _can_w8a8

    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 128, generator=g) * 0.02
    x = torch.randn(2, 5, 128, generator=g)
    bias = torch.randn(64, generator=g)
    w8, s = quantize_per_channel(w)
    y = w8a8_linear(x, w8, s, bias)
    ref = F.linear(x, dequantize(w8, s), bias)
    assert y.shape == (2, 5, 64) and y.dtype == torch.float32
    rel = float((y - ref).norm() / ref.norm())
    assert 1e-4 < rel < 0.05  # activation quantization costs something, not much
    # the engine never picks it for CPU tensors (nor for block scales)
    layer = SimpleNamespace(weight=w8, weight_scale=s, fp8_use_w8a8=True)
    assert not _can_w8a8(layer, x)


def _need_fp8_gemm():
    if not w8a8_supported(torch.device("cuda")):
        pytest.skip("FP8 tensor cores need compute capability 8.9+")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_w8a8_close_to_weight_only(dtype):
    _need_fp8_gemm()
    g = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(512, 1024, device="cuda", generator=g) * 0.02
    x = torch.randn(33, 1024, device="cuda", generator=g).to(dtype)
    bias = torch.randn(512, device="cuda", generator=g).to(dtype)
    w8, s = quantize_per_channel(w)
    y = w8a8_linear(x, w8, s, bias)
    ref = F.linear(x.float(), dequantize(w8, s), bias.float())
    assert y.dtype == dtype and y.shape == (33, 512)
    rel = (y.float() - ref).norm() / ref.norm()
    assert rel < 0.05  # per-token E4M3 activations: ~2-3% relative error in the product


@pytest.mark.gpu
def test_engine_uses_w8a8_and_stays_close():
    _need_fp8_gemm()
    from llmbench.quality.run import BUILTIN_TEXTS, run_quality_check
    from refengine import LLM
    from refengine.model.layers.linear import LinearBase

    kw = dict(device="cuda", dtype="bfloat16", max_model_len=512, kv_cache_memory_bytes=1 << 26)
    ref = LLM("tiny", **kw)
    q = LLM("tiny", quantization="fp8", **kw)
    linears = [m for m in q.llm_engine.runner.model.modules() if isinstance(m, LinearBase)]
    assert linears and all(m.fp8_use_w8a8 and m.fp8_dequant_cache is None for m in linears)
    result = run_quality_check(ref, q, list(BUILTIN_TEXTS[:4]), greedy_tokens=8)
    assert result.passed, result.as_dict()
