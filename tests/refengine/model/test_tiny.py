"""The built-in tiny models, the tokenizer and streaming helpers, config parsing and loader errors."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch

from refengine.attention.metadata import build_attention_metadata
from refengine.errors import RefEngineError
from refengine.model import tiny
from refengine.model.hf_config import load_model_config, parse_model_config
from refengine.model.layers.attention import allocate_kv_caches, kv_cache_bytes_per_block
from refengine.model.loader import load_model
from refengine.tokenizer import IncrementalDetokenizer, find_stop, load_tokenizer


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny.ensure_preset("tiny-test", tmp_path_factory.mktemp("cache"))


def test_tiny_test_is_deterministic(tiny_dir, tmp_path):
    again = tiny.ensure_preset("tiny-test", tmp_path)
    assert again != tiny_dir
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert _sha(again / name) == _sha(tiny_dir / name), name
    assert tiny.ensure_preset("tiny-test", tmp_path) == again  # cached: no regeneration
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left behind


def test_tiny_test_loads_and_runs(tiny_dir):
    mc = load_model_config(tiny_dir)
    assert mc.architecture == "LlamaForCausalLM" and mc.tie_word_embeddings
    assert mc.vocab_size == tiny.VOCAB_SIZE == load_tokenizer(tiny_dir).vocab_size
    assert mc.num_parameters() == 354_624
    model = load_model(tiny_dir, mc, torch.float32, "cpu")
    assert sum(p.numel() for p in model.parameters()) == mc.num_parameters()
    kv = allocate_kv_caches(mc, num_blocks=8, block_size=16, dtype=torch.float32, device="cpu")
    assert kv[0].shape == (2, 8, 16, 2, 16) and len(kv) == 2
    assert kv_cache_bytes_per_block(mc, 16, torch.float32) == 2 * 2 * 16 * 2 * 16 * 4
    ids = torch.tensor([1, 5, 9, 200, 17])
    meta = build_attention_metadata([(0, 5, [3])], 16, "cpu")
    logits = model.compute_logits(model(ids, torch.arange(5), kv, meta))
    assert logits.shape == (5, tiny.VOCAB_SIZE) and logits.dtype == torch.float32
    assert torch.isfinite(logits).all() and logits.std() > 0.05


def test_tiny_preset_sizes():
    counts = {n: parse_model_config(tiny.model_config_dict(p)).num_parameters() for n, p in tiny.PRESETS.items()}
    assert counts == {"tiny-test": 354_624, "tiny": 98_583_552}


def test_resolve_model(tiny_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("LLMBENCH_CACHE", str(tiny_dir.parent.parent))
    assert tiny.cache_root() == tiny_dir.parent.parent / "models"
    assert tiny.resolve_model(str(tiny_dir)) == tiny_dir
    with pytest.raises(RefEngineError, match="neither a built-in preset .* never downloads"):
        tiny.resolve_model("meta-llama/Llama-3-8B")
    with pytest.raises(RefEngineError, match="neither"):
        tiny.resolve_model(str(tmp_path))  # a directory without config.json


def test_tokenizer_round_trip_and_specials(tiny_dir):
    tok = load_tokenizer(tiny_dir)
    text = "The quick brown fox, héllo 世界 🙂!"
    ids = tok.encode(text)
    assert ids[0] == tok.bos_token_id == 1 and tok.eos_token_id == 2
    assert tok.decode(ids) == text
    assert tok.encode(text, add_bos=False) == ids[1:]
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert prompt == "<s><|user|>\nHi</s>\n<|assistant|>\n"
    assert tok.encode(prompt, add_bos=False)[:2] == [1, tok.token_to_id("<|user|>")]
    assert load_tokenizer(tiny_dir.parent) is None  # no tokenizer.json: token-id prompts only


def test_incremental_detokenizer_multibyte(tiny_dir):
    tok = load_tokenizer(tiny_dir)
    text = "héllo 世界 🙂 and a story about ünïcödé ✓"
    ids = tok.encode(text, add_bos=False)
    assert len(ids) > len(text.split())  # multi-byte characters really are split across tokens
    detok = IncrementalDetokenizer(tok, prompt_ids=tok.encode("Prompt:"))
    deltas = [detok.step([i]) for i in ids]
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) + detok.flush() == text == detok.text
    # Several ids at once and a trailing EOS (skipped) give the same text.
    detok = IncrementalDetokenizer(tok)
    out = detok.step(ids[:5]) + detok.step(ids[5:]) + detok.step([tok.eos_token_id])
    assert out == text


def test_find_stop():
    assert find_stop("hello world", ["wor"]) == 6
    assert find_stop("hello world", ["xyz"]) is None
    assert find_stop("a STOP b END", ["END", "STOP"]) == 2  # earliest wins
    text = "abc" + "de"  # "cd" spans the previous delta (ending at 3) and the new one
    assert find_stop(text, ["cd"], start=3) == 2
    assert find_stop("abcde", ["ab"], start=3) is None  # already checked region not rescanned
    assert find_stop("abc", [""], start=0) is None


def _write_config(path, **cfg):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def test_config_errors(tmp_path):
    with pytest.raises(RefEngineError, match="does not exist"):
        load_model_config(tmp_path / "nope")
    with pytest.raises(RefEngineError, match="no config.json"):
        load_model_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(RefEngineError, match="not valid JSON"):
        load_model_config(tmp_path)
    bad = _write_config(tmp_path / "gpt2", architectures=["GPT2LMHeadModel"], hidden_size=8)
    with pytest.raises(RefEngineError, match="LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM"):
        load_model_config(bad)


def test_config_parsing_variants():
    base = dict(
        architectures=["LlamaForCausalLM"],
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=100,
    )
    mc = parse_model_config(base)
    assert mc.num_key_value_heads == 4 and mc.head_dim == 16 and mc.rope_scaling is None and mc.eos_token_id is None
    # transformers 4.x spelling, Llama 3.1 style: eos list, rope_theta + rope_scaling.
    mc = parse_model_config(
        {
            **base,
            "rope_theta": 500000.0,
            "eos_token_id": [128001, 128009],
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        }
    )
    assert mc.rope_theta == 500000.0 and mc.rope_scaling["rope_type"] == "llama3"
    assert mc.eos_token_ids == [128001, 128009] and mc.eos_token_id == 128001
    mc = parse_model_config({**base, "rope_scaling": {"type": "linear", "factor": 2.0}})
    assert mc.rope_scaling == {"rope_type": "linear", "factor": 2.0}
    # transformers 5.x spelling.
    mc = parse_model_config({**base, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})
    assert mc.rope_theta == 1e6 and mc.rope_scaling is None
    qwen = parse_model_config({**base, "architectures": ["Qwen2ForCausalLM"], "head_dim": None})
    assert qwen.attention_bias and not qwen.o_proj_bias and qwen.head_dim == 16
    with pytest.raises(RefEngineError, match="longrope"):
        parse_model_config({**base, "rope_scaling": {"rope_type": "longrope", "factor": 2.0}})


def test_loader_errors(tiny_dir, tmp_path):
    mc = load_model_config(tiny_dir)
    empty = _write_config(tmp_path / "bin", **tiny.model_config_dict(tiny.PRESETS["tiny-test"]))
    (empty / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(RefEngineError, match=r"\.bin checkpoints are not supported.*safe_serialization=True"):
        load_model(empty, mc)
    from safetensors.torch import load_file, save_file

    weights = load_file(tiny_dir / "model.safetensors")
    del weights["model.layers.1.self_attn.k_proj.weight"], weights["model.norm.weight"]
    partial = _write_config(tmp_path / "partial", **tiny.model_config_dict(tiny.PRESETS["tiny-test"]))
    save_file(weights, partial / "model.safetensors")
    with pytest.raises(RefEngineError, match=r"missing 2 weight.*layers\.1\.self_attn\.k_proj\.weight.*model\.norm"):
        load_model(partial, mc)


def test_concurrent_generation_is_safe(tmp_path):
    """Two processes generating the same preset into one cache both end with the same complete directory."""
    import subprocess
    import sys

    code = "import sys; from refengine.model.tiny import ensure_preset; print(ensure_preset('tiny-test', sys.argv[1]))"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert outs[0] == outs[1] == str(tmp_path / f"tiny-test-{tiny.VERSION}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"tiny-test-{tiny.VERSION}"]
    assert load_tokenizer(outs[0]).vocab_size == tiny.VOCAB_SIZE
