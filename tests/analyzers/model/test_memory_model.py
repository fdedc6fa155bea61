"""The memory model against the seed's numbers, vLLM's block math, published parameter counts and
the engine's own KV accounting."""

import json
import math

import pytest
import torch

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.memory import (
    GiB,
    MemoryEstimate,
    MiB,
    ServingPlan,
    dtype_bytes,
    estimate_memory,
    kv_bytes_per_token_per_gpu,
    weights_per_gpu,
)
from analyzers.model.presets import PRESETS, ModelShape, resolve_model
from analyzers.oom.fixes import suggest_fixes, verdict

L70 = PRESETS["llama-3-70b"]


def test_seed_kv_numbers():
    # 80 layers x 8 KV heads x 128 dims x FP16: 320 KiB per token, 640 MiB per 2,048 tokens, 20 GiB for 32.
    assert (L70.num_layers, L70.num_kv_heads, L70.head_dim) == (80, 8, 128)
    per_token = L70.kv_bytes_per_token(dtype_bytes("fp16"))
    assert per_token == 327_680 == 320 * 1024
    plan = ServingPlan(weight_dtype="fp16", max_model_len=2048, concurrency=32, gpu_memory_gib=1000)
    est = estimate_memory(L70, plan)
    assert est.kv_bytes_per_token_gpu == per_token  # TP1 PP1: one GPU holds it all
    assert est.blocks_per_request(2048) * est.block_bytes == 640 * MiB
    assert est.kv_needed == 20 * GiB


def test_seed_weights_70b_fp16_is_about_140_gb():
    w = weights_per_gpu(L70, ServingPlan(weight_dtype="fp16"))
    assert 139e9 < w < 143e9  # 70.6B x 2 bytes
    assert not estimate_memory(L70, ServingPlan(weight_dtype="fp16", gpu_memory_gib=80)).loads


@pytest.mark.parametrize(
    "name, published",
    [
        ("llama-3-8b", 8.0e9),
        ("llama-3-70b", 70.6e9),
        ("qwen2-7b", 7.6e9),
        ("qwen2-72b", 72.7e9),
        ("mixtral-8x7b", 46.7e9),
    ],
)
def test_preset_parameter_counts_match_published(name, published):
    assert PRESETS[name].num_parameters() == pytest.approx(published, rel=0.01)


def test_mixtral_active_parameters_are_about_12_9b():
    assert PRESETS["mixtral-8x7b"].active_parameters() == pytest.approx(12.9e9, rel=0.01)


def test_gqa_and_kv_heads_replicated_beyond_tp():
    plan = ServingPlan(weight_dtype="bf16")
    per = {tp: kv_bytes_per_token_per_gpu(L70, plan.with_(tp=tp)) for tp in (1, 2, 8, 16)}
    assert per[2] == per[1] / 2 and per[8] == per[1] / 8
    assert per[16] == per[8]  # 8 KV heads: at TP16 each GPU still holds one
    q7 = PRESETS["qwen2-7b"]  # 4 KV heads, 28 query heads
    assert q7.kv_bytes_per_token(2) == 2 * 28 * 4 * 128 * 2


def test_pp_splits_layers_with_the_fullest_stage_reported():
    plan = ServingPlan()
    assert kv_bytes_per_token_per_gpu(L70, plan.with_(pp=2)) == L70.kv_bytes_per_token(2) / 2
    assert kv_bytes_per_token_per_gpu(L70, plan.with_(pp=3)) == 2 * 27 * 8 * 128 * 2  # ceil(80 / 3) = 27
    assert weights_per_gpu(L70, plan.with_(tp=8, pp=2)) < weights_per_gpu(L70, plan.with_(tp=8))


def _estimate(num_blocks: int, max_model_len: int, block_size: int = 16) -> MemoryEstimate:
    """A hand-built estimate with exactly num_blocks blocks (parts consistent with the invariant)."""
    shape = ModelShape("toy", 64, 2, 4, 2, 16, 128, 100)
    plan = ServingPlan(
        max_model_len=max_model_len, block_size=block_size, gpu_memory_gib=1.0, gpu_memory_utilization=1.0
    )
    per_token = 2 * 2 * 2 * 16 * 2.0
    kv = num_blocks * per_token * block_size
    return MemoryEstimate(
        shape,
        plan,
        total=GiB,
        usable=GiB,
        weights=GiB - kv,
        activations=0,
        comm_buffers=0,
        cuda_context=0,
        cuda_graphs=0,
        fragmentation=0,
        kv_budget=kv,
        kv_bytes_per_token_gpu=per_token,
        num_blocks=num_blocks,
    )


def test_vllm_block_math_worked_example():
    # vLLM: "# GPU blocks: 2000" with block_size 16 = 32,000 tokens. max_model_len 4096 needs
    # ceil(4096 / 16) = 256 blocks, so max concurrency = 2000 // 256 = 7 (vLLM prints 7.81x).
    est = _estimate(2000, 4096)
    assert est.kv_tokens == 32_000
    assert est.blocks_per_request(4096) == 256
    assert est.max_concurrency() == 7
    assert est.safe_concurrency() == 5  # floor(7 x 0.8)
    # A request is rounded up to whole blocks: 4000 tokens -> 250 blocks -> 8; 4001 -> 251 -> 7.
    assert _estimate(2000, 4000).max_concurrency() == 8
    assert _estimate(2000, 4001).max_concurrency() == 7


def test_estimate_parts_add_up_and_tp_frees_memory():
    est1 = estimate_memory(L70, ServingPlan(tp=4))
    est8 = estimate_memory(L70, ServingPlan(tp=8))
    for est in (est1, est8):
        total = est.non_kv + est.kv_budget + (est.total - est.usable)
        assert math.isclose(total, 80 * GiB)
    assert est8.weights < est1.weights / 1.9
    assert est8.comm_buffers > 0 and estimate_memory(PRESETS["llama-3-8b"], ServingPlan()).comm_buffers == 0
    assert est8.max_concurrency() > 2 * est1.max_concurrency()


def test_activation_and_allreduce_estimates_scale_with_the_token_budget():
    # With few sampled rows the layer's peak (linear in tokens) dominates the sampler's logits.
    layer = lambda t: (
        estimate_memory(L70, ServingPlan(max_num_seqs=16, max_num_batched_tokens=t, gpu_memory_gib=400)).activations
    )
    assert layer(8192) == pytest.approx(4 * layer(2048))
    # With 256 sequences sampled the fp32 logits (256 x 128,256 x 4 B, twice) set a floor.
    assert estimate_memory(L70, ServingPlan(tp=8, max_num_batched_tokens=256)).activations > 256 * 128256 * 8
    small = estimate_memory(L70, ServingPlan(tp=8, max_num_batched_tokens=2048))
    big = estimate_memory(L70, ServingPlan(tp=8, max_num_batched_tokens=8192))
    assert big.comm_buffers - small.comm_buffers == pytest.approx((8192 - 2048) * 8192 * 2)


def test_matches_the_engines_own_kv_block_bytes():
    from refengine.model.hf_config import parse_model_config
    from refengine.model.layers.attention import kv_cache_bytes_per_block

    shape = resolve_model("tiny")
    cfg = parse_model_config(
        {
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 1024,
            "num_attention_heads": 16,
            "num_key_value_heads": 4,
            "num_hidden_layers": 8,
            "intermediate_size": 2816,
            "vocab_size": 4096,
        }
    )
    for tp in (1, 2, 4):
        plan = ServingPlan(tp=tp, weight_dtype="fp32")
        ours = kv_bytes_per_token_per_gpu(shape, plan) * 16
        assert ours == kv_cache_bytes_per_block(cfg, 16, torch.float32, tp_size=tp)


def test_kv_dtype_by_bytes_per_element():
    base = ServingPlan(tp=8)
    fp16 = estimate_memory(L70, base)
    fp8 = estimate_memory(L70, base.with_(kv_dtype="fp8"))
    int4 = estimate_memory(L70, base.with_(kv_dtype="int4"))
    assert fp8.kv_bytes_per_token_gpu == fp16.kv_bytes_per_token_gpu / 2 == 2 * int4.kv_bytes_per_token_gpu
    assert fp8.max_concurrency() in range(2 * fp16.max_concurrency() - 1, 2 * fp16.max_concurrency() + 2)


def test_verdict_and_fixes_in_the_seed_order():
    est = estimate_memory(L70, ServingPlan(tp=4, max_model_len=32768, concurrency=64))
    v = verdict(est)
    assert not v.fits and "64 asked for" in v.headline
    fixes = suggest_fixes(est)
    assert [f.step for f in fixes] == [1, 2, 3, 4, 5, 5]
    assert "max_model_len=16,384" in fixes[1].change
    assert f"max_num_seqs={est.safe_concurrency()}" in fixes[3].change
    assert "kv_cache_dtype=fp8" in fixes[4].change and "fp8" in fixes[5].change
    # Every fix that buys concurrency says so with a larger number after than before.
    worst = int(fixes[1].before.split(": ")[1].split()[0])
    assert int(fixes[1].after.split(": ")[1].split()[0]) >= 2 * worst - 1


def test_plan_that_does_not_load_says_it_is_a_weights_problem():
    v = verdict(estimate_memory(L70, ServingPlan(weight_dtype="bf16", gpu_memory_gib=80)))
    assert not v.fits and v.headline.startswith("does not load")
    assert any("not KV" in r for r in v.reasons)


def test_hf_config_path_and_builtin_names(tmp_path):
    cfg = {
        "architectures": ["MixtralForCausalLM"],
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "intermediate_size": 14336,
        "vocab_size": 32000,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "max_position_embeddings": 32768,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    shape = resolve_model(str(tmp_path))
    assert shape.num_parameters() == PRESETS["mixtral-8x7b"].num_parameters()
    assert resolve_model("tiny").num_parameters() == 98_583_552
    assert resolve_model("tiny-test").num_parameters() == 354_624
    assert resolve_model("meta-llama/Meta-Llama-3-70B-Instruct") == L70


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(tp=3), "TP 3 does not divide"),
        (dict(pp=81), "PP 81 exceeds"),
        (dict(gpu_memory_utilization=1.5), "gpu_memory_utilization"),
        (dict(weight_dtype="fp7"), "unknown dtype"),
        (dict(request_tokens=5000, max_model_len=4096), "request_tokens"),
    ],
)
def test_impossible_plans_are_user_errors(bad, message):
    with pytest.raises(DiagnosisError, match=message):
        estimate_memory(L70, ServingPlan(**bad))


def test_unknown_model_is_a_user_error():
    with pytest.raises(DiagnosisError, match="unknown model 'gpt-17'"):
        resolve_model("gpt-17")
