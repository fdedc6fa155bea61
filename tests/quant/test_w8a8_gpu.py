"""W8A8 (FP8 x FP8 GEMM with per-token activation and per-channel weight scales) on a lent GPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from refengine.quant.fp8 import dequantize, quantize_per_channel
from refengine.quant.fp8_matmul import w8a8_linear, w8a8_supported

pytestmark = pytest.mark.gpu


def _need_fp8_gemm():
    if not w8a8_supported(torch.device("cuda")):
        pytest.skip("FP8 tensor cores need compute capability 8.9+")


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
    assert rel < 0.05   # per-token E4M3 activations: ~2-3% relative error in the product


def test_engine_uses_w8a8_and_stays_close():
    _need_fp8_gemm()
    from llmbench.quality import BUILTIN_TEXTS, run_quality_check
    from refengine import LLM
    from refengine.model.layers.linear import LinearBase

    kw = dict(device="cuda", dtype="bfloat16", max_model_len=512, kv_cache_memory_bytes=1 << 26)
    ref = LLM("tiny", **kw)
    q = LLM("tiny", quantization="fp8", **kw)
    linears = [m for m in q.llm_engine.runner.model.modules() if isinstance(m, LinearBase)]
    assert linears and all(m.fp8_use_w8a8 and m.fp8_dequant_cache is None for m in linears)
    result = run_quality_check(ref, q, list(BUILTIN_TEXTS[:4]), greedy_tokens=8)
    assert result.passed, result.as_dict()
