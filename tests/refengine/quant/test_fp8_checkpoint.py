"""Loading checkpoints that are already FP8, in both Hugging Face layouts, written here from tiny-test."""

from __future__ import annotations

import pytest
import torch

from refengine import LLM
from refengine.errors import RefEngineError
from refengine.model.loader import iter_checkpoint, safetensors_files
from refengine.model.tiny import resolve_model
from refengine.numerics.fp8 import FP8_DTYPE, dequantize, quantize, quantize_blocks
from refengine.quant.export import export_fp8

KW = dict(max_model_len=128, kv_cache_memory_bytes=1 << 21)


@pytest.fixture(scope="module")
def original():
    return dict(iter_checkpoint(safetensors_files(resolve_model("tiny-test"))))


def _layer(llm, name):
    return dict(llm.llm_engine.runner.model.named_modules())[name]


def _effective_weight(layer):
    return dequantize(layer.weight.data, layer.weight_scale.data, torch.float32, getattr(layer, "fp8_block", 128))


def _expected(original, fused_parts, kind, block=128):
    """Dequantized checkpoint weights of the unfused parts, stacked like the fused layer."""
    parts = []
    for name in fused_parts:
        w8, s = quantize_blocks(original[name], block) if kind == "block" else quantize(original[name], kind)
        parts.append(dequantize(w8, s, torch.float32, block))
    return torch.cat(parts)


QKV = [f"model.layers.1.self_attn.{p}_proj.weight" for p in "qkv"]


@pytest.mark.parametrize("strategy", ["tensor", "channel"])
def test_compressed_tensors(tmp_path, original, strategy):
    llm = LLM(str(export_fp8("tiny-test", tmp_path / "ct", "compressed-tensors", strategy)), **KW)
    assert llm.llm_engine.quant.policy.quantization == "fp8"
    qkv = _layer(llm, "model.layers.1.self_attn.qkv_proj")
    assert qkv.weight.dtype == FP8_DTYPE and qkv.weight_scale.shape == (qkv.weight.shape[0], 1)
    if strategy == "tensor":  # three per-tensor scales (q, k, v) became rows of one per-channel scale
        assert len(torch.unique(qkv.weight_scale)) == 3
    torch.testing.assert_close(_effective_weight(qkv), _expected(original, QKV, strategy), rtol=0, atol=0)
    down = _layer(llm, "model.layers.0.mlp.down_proj")
    torch.testing.assert_close(
        _effective_weight(down), _expected(original, ["model.layers.0.mlp.down_proj.weight"], strategy), rtol=0, atol=0
    )
    out = llm.generate(["hello"], None)
    assert len(out[0].outputs[0].token_ids) > 0


def test_channel_checkpoint_equals_online_quantization(tmp_path):
    """Same scales, same codes: a per-channel FP8 checkpoint and online per-channel FP8 give equal logits."""
    from llmbench.quality.run import teacher_forced_logits

    ckpt = LLM(str(export_fp8("tiny-test", tmp_path / "ct", "compressed-tensors", "channel")), **KW)
    online = LLM("tiny-test", quantization="fp8", **KW)
    ids = online.llm_engine.encode_prompt("the cat sat on the mat")[1]
    torch.testing.assert_close(teacher_forced_logits(ckpt, ids), teacher_forced_logits(online, ids))


def test_fine_grained_blocks(tmp_path, original):
    llm = LLM(str(export_fp8("tiny-test", tmp_path / "fg", "fine-grained", block=16)), **KW)
    qkv = _layer(llm, "model.layers.1.self_attn.qkv_proj")
    assert qkv.weight_scale.shape == (128 // 16, 64 // 16)  # q 64 + k 32 + v 32 rows, hidden 64
    torch.testing.assert_close(_effective_weight(qkv), _expected(original, QKV, "block", 16), rtol=0, atol=0)
    gate_up = _layer(llm, "model.layers.0.mlp.gate_up_proj")
    torch.testing.assert_close(
        _effective_weight(gate_up),
        _expected(original, [f"model.layers.0.mlp.{p}_proj.weight" for p in ("gate", "up")], "block", 16),
        rtol=0,
        atol=0,
    )


def test_blocks_that_straddle_fused_shards_are_refused(tmp_path):
    # tiny-test's k_proj has 32 rows: 128-row blocks cannot be split between q, k and v.
    with pytest.raises(RefEngineError, match="block boundaries"):
        LLM(str(export_fp8("tiny-test", tmp_path / "fg128", "fine-grained", block=128)), **KW)


def test_ignore_list_and_user_skip(tmp_path, original):
    path = export_fp8("tiny-test", tmp_path / "skip", "compressed-tensors", "channel", skip=("o_proj",))
    llm = LLM(str(path), quantization_skip="qkv_proj", **KW)
    o = _layer(llm, "model.layers.0.self_attn.o_proj")  # never quantized in the checkpoint
    assert o.weight.dtype == torch.float32
    torch.testing.assert_close(o.weight.data, original["model.layers.0.self_attn.o_proj.weight"])
    qkv = _layer(llm, "model.layers.1.self_attn.qkv_proj")  # FP8 in the checkpoint, upcast by the policy
    assert qkv.weight.dtype == torch.float32 and not hasattr(qkv, "weight_scale")
    torch.testing.assert_close(qkv.weight.data, _expected(original, QKV, "channel"), rtol=0, atol=0)
    d = llm.llm_engine.quant.policy.as_dict()
    assert d["fp8_modules"] == ["mlp.gate_up_proj", "mlp.down_proj"]
