"""The engine with FP8 weights and/or an FP8 KV cache, on tiny-test (random weights, CPU float32).

Documented bound (docs/quantization.md): on tiny-test, FP8 weights (per-channel or block) plus
an FP8 KV cache keep the mean KL(fp32 || fp8) of next-token distributions under 1e-4 nats and
top-1 agreement at 100% on the built-in texts (measured: ~3e-6 nats). The model's distributions
are near-uniform, which is why the bound is this small; the same check with scales x4 gives
~2e-2 nats and 0% top-1 (test_quality.py).
"""

from __future__ import annotations

import pytest
import torch

from llmbench.quality.run import BUILTIN_TEXTS, compare_positions, teacher_forced_logits
from refengine import LLM, SamplingParams
from refengine.errors import RefEngineError
from refengine.model.layers.attention import Attention
from refengine.numerics.fp8 import FP8_DTYPE, FP8_MAX
from refengine.numerics.kv_cache import kv_cache_bytes_per_token

KW = dict(max_model_len=256, kv_cache_memory_bytes=1 << 22, seed=0)
KL_BOUND = 1e-4


@pytest.fixture(scope="module")
def ref():
    return LLM("tiny-test", **KW)


def _linears(llm):
    from refengine.model.layers.linear import LinearBase

    return {n: m for n, m in llm.llm_engine.runner.model.named_modules() if isinstance(m, LinearBase)}


@pytest.mark.parametrize(
    "extra",
    [
        dict(quantization="fp8"),
        dict(quantization="fp8", fp8_weight_scales="block"),
        dict(quantization="fp8", kv_cache_dtype="fp8"),
        dict(kv_cache_dtype="fp8"),
    ],
)
def test_fp8_engine_kl_to_fp32_under_bound(ref, extra):
    q = LLM("tiny-test", **KW, **extra)
    kls, same = [], []
    for text in BUILTIN_TEXTS[:4]:
        ids = ref.llm_engine.encode_prompt(text)[1]
        s = compare_positions(teacher_forced_logits(ref, ids), teacher_forced_logits(q, ids), ids)
        kls.append(s["kl"])
        same.append(s["top1_same"])
    kl = torch.cat(kls)
    assert float(kl.mean()) < KL_BOUND
    assert float(kl.mean()) > 0  # it is really quantized: something moved
    assert bool(torch.cat(same).all())
    # and the engine's own greedy decode (paged decode path) agrees
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    a = ref.generate(list(BUILTIN_TEXTS[:2]), params)
    b = q.generate(list(BUILTIN_TEXTS[:2]), params)
    assert [o.outputs[0].token_ids for o in a] == [o.outputs[0].token_ids for o in b]


def test_policy_defaults_and_skip():
    q = LLM("tiny-test", quantization="fp8", quantization_skip="q_proj,self_attn.o_proj", **KW)
    lin = _linears(q)
    for name, m in lin.items():
        fp8 = name.endswith(("gate_up_proj", "down_proj"))
        assert (m.weight.dtype == FP8_DTYPE) == fp8, name
    model = q.llm_engine.runner.model
    assert model.lm_head.weight.dtype == torch.float32
    assert model.model.embed_tokens.weight.dtype == torch.float32
    d = q.llm_engine.quant.policy.as_dict()
    assert d["skip"] == ["qkv_proj", "self_attn.o_proj"]
    assert "self_attn.qkv_proj" in d["unquantized_modules"] and "mlp.down_proj" in d["fp8_modules"]
    assert "lm_head" in q.llm_engine.quant.policy.summary()


def test_bad_flags_are_one_line_errors():
    with pytest.raises(RefEngineError, match="match no linear layer"):
        LLM("tiny-test", quantization="fp8", quantization_skip="qkv_prj", **KW)
    with pytest.raises(RefEngineError, match="quantization must be one of"):
        LLM("tiny-test", quantization="int4", **KW)
    with pytest.raises(RefEngineError, match="kv_cache_dtype must be one of"):
        LLM("tiny-test", kv_cache_dtype="fp8_e5m2", **KW)
    with pytest.raises(RefEngineError, match="needs kv_cache_dtype fp8"):
        LLM("tiny-test", calculate_kv_scales=True, **KW)
    with pytest.raises(RefEngineError, match="quantization is off"):
        LLM("tiny-test", quantization_skip="qkv_proj", **KW)


def test_kv_blocks_follow_the_byte_size(ref):
    """The engine's block count with fp8 vs float32 KV is the byte-size ratio (what the memory model uses)."""
    q = LLM("tiny-test", kv_cache_dtype="fp8", **KW)
    cfg = ref.llm_engine.model_config
    per_tok_ref = kv_cache_bytes_per_token(cfg, "auto", torch.float32)
    per_tok_fp8 = kv_cache_bytes_per_token(cfg, "fp8")
    assert per_tok_ref == cfg.kv_bytes_per_token(4) and per_tok_fp8 == cfg.kv_bytes_per_token(1)
    budget, bs = KW["kv_cache_memory_bytes"], ref.llm_engine.args.block_size
    assert ref.llm_engine.cache_config.num_blocks == budget // (bs * per_tok_ref)
    assert q.llm_engine.cache_config.num_blocks == budget // (bs * per_tok_fp8)
    assert q.llm_engine.cache_config.num_blocks == 4 * ref.llm_engine.cache_config.num_blocks
    assert q.llm_engine.runner.kv_caches[0].dtype == FP8_DTYPE
    rep = q.llm_engine.quant_memory
    assert rep.kv_blocks_gained == 3 * ref.llm_engine.cache_config.num_blocks
    # bfloat16 KV would have been half of float32's bytes: fp8 is 2x over it
    assert kv_cache_bytes_per_token(cfg, "auto", torch.bfloat16) == 2 * per_tok_fp8


def test_weight_bytes_saved():
    q = LLM("tiny-test", quantization="fp8", **KW)
    rep = q.llm_engine.quant_memory
    fp8_params = sum(m.weight.numel() for m in _linears(q).values())
    scales = sum(m.weight_scale.numel() for m in _linears(q).values())
    assert rep.weight_bytes_saved == fp8_params * 3 - scales * 4
    assert rep.dequant_cache_bytes == fp8_params * 4  # CPU keeps a float32 copy, reported apart


def test_kv_scale_calibration_sets_amax_over_448():
    q = LLM("tiny-test", kv_cache_dtype="fp8", calculate_kv_scales=True, **KW)
    layers = [m for m in q.llm_engine.runner.model.modules() if isinstance(m, Attention)]
    assert all(m.k_scale != 1.0 and m.v_scale != 1.0 for m in layers)
    # re-observe one prompt: its amax can't exceed the calibrated scale x 448 by much (same texts)
    seen = []
    layers[0].kv_observer = lambda layer, k, v: seen.append(float(k.abs().max()))
    teacher_forced_logits(q, q.llm_engine.encode_prompt("The quick brown fox jumps over the lazy dog")[1])
    layers[0].kv_observer = None
    assert 0 < seen[0] <= layers[0].k_scale * FP8_MAX * 1.0001


def test_policy_and_bytes_in_server_metrics():
    from types import SimpleNamespace

    from refengine.config import EngineArgs
    from refengine.engine import LLMEngine
    from refengine.server.metrics import ServerMetrics

    engine = LLMEngine(
        EngineArgs(model="tiny-test", quantization="fp8", quantization_skip="seed", kv_cache_dtype="fp8", **KW)
    )
    loop = SimpleNamespace(engine=engine, stats=engine.stats(), healthy=True, num_waiting_admitted=0)
    text = ServerMetrics(loop, "m", 16, engine.cache_config.num_blocks).render().decode()
    assert "refengine:quantization_info{" in text and 'skip="qkv_proj"' in text and 'kv_cache_dtype="fp8"' in text
    assert (
        f'refengine:model_memory_bytes{{model_name="m",what="kv_per_token"}} {float(engine.quant_memory.kv_bytes_per_token)}'
        in text
    )


def test_server_prints_and_exports_the_policy():
    """A real `python -m refengine.server` on loopback: the start-up lines and /metrics carry the policy."""
    import urllib.request

    from llmbench.sweep.embedded import EmbeddedServer

    args = [
        "--quantization",
        "fp8",
        "--quantization-skip",
        "seed",
        "--kv-cache-dtype",
        "fp8",
        "--max-model-len",
        "256",
        "--kv-cache-memory-bytes",
        str(1 << 22),
    ]
    with EmbeddedServer("tiny-test", args, startup_timeout_s=120) as server:
        metrics = urllib.request.urlopen(server.url + "/metrics", timeout=10).read().decode()
        log = server.tail(50)
    assert "precision policy: weights fp8 (channel scales)" in log and "self_attn.qkv_proj; KV cache fp8" in log
    assert "KV 128 B/token (unquantized 512)" in log
    assert "refengine:quantization_info{" in metrics and 'skip="qkv_proj"' in metrics
