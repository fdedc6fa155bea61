"""`llmbench quality`: passes a sound FP8 quantization, fails a deliberately broken one (scales x4)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from llmbench.cli import app
from llmbench.quality.run import (
    QualityThresholds,
    greedy_match_length,
    load_prompts,
    run_quality_check,
    sabotage_fp8_scales,
)
from refengine import LLM
from refengine.errors import RefEngineError

KW = dict(max_model_len=256, kv_cache_memory_bytes=1 << 22)


@pytest.fixture(scope="module")
def ref():
    return LLM("tiny-test", **KW)


def test_sound_fp8_passes_and_broken_fails(ref):
    prompts = load_prompts(None)[:4]
    good = run_quality_check(
        ref, LLM("tiny-test", quantization="fp8", kv_cache_dtype="fp8", **KW), prompts, greedy_tokens=8
    )
    assert good.passed, good.checks
    assert good.top1_agreement == 1.0 and good.greedy_match_mean == 8
    assert good.ppl_ratio == pytest.approx(1.0, abs=1e-3)

    broken = LLM("tiny-test", quantization="fp8", **KW)
    assert sabotage_fp8_scales(broken, 4.0) == 8  # 2 layers x (qkv, o, gate_up, down)
    bad = run_quality_check(ref, broken, prompts, greedy_tokens=8)
    assert not bad.passed
    assert bad.near_uniform and not bad.checks["relative_kl"]  # tiny-test has random weights
    assert bad.relative_kl > 0.5 and good.relative_kl < 0.01
    assert bad.top1_agreement < 0.5 and bad.mean_kl > 100 * good.mean_kl
    # the verdict follows the limits: loose enough, the broken one passes; a trained-model regime
    # (near_uniform_nats 0) judges absolute KL and top-1, which it fails too
    loose = QualityThresholds(max_relative_kl=10.0, max_ppl_ratio=2.0)
    assert run_quality_check(ref, broken, prompts[:1], loose, 4).passed
    strict = run_quality_check(ref, broken, prompts[:1], QualityThresholds(near_uniform_nats=0.0), 4)
    assert not strict.checks["top1_agreement"] and "relative_kl" not in strict.checks


def test_cli_exit_codes_and_json(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(
        app,
        [
            "quality",
            "--model",
            "tiny-test",
            "--max-prompts",
            "3",
            "--greedy-tokens",
            "4",
            "--json",
            str(tmp_path / "q.json"),
        ],
    )
    assert ok.exit_code == 0, ok.output
    assert "PASS" in ok.output and "precision policy" in ok.output
    data = json.loads((tmp_path / "q.json").read_text())
    assert data["passed"] and data["policy"]["quantization"] == "fp8" and data["num_prompts"] == 3
    bad = runner.invoke(
        app, ["quality", "--model", "tiny-test", "--max-prompts", "3", "--greedy-tokens", "4", "--sabotage-scales", "4"]
    )
    assert bad.exit_code == 1 and "FAIL" in bad.output
    err = runner.invoke(app, ["quality", "--model", "tiny-test", "--dataset", str(tmp_path / "missing.txt")])
    assert err.exit_code == 2 and "does not exist" in " ".join(err.output.split()) and "Traceback" not in err.output


def test_dataset_files(tmp_path):
    (tmp_path / "p.txt").write_text("first prompt\n\nsecond prompt\n")
    assert load_prompts(tmp_path / "p.txt") == ["first prompt", "second prompt"]
    (tmp_path / "p.jsonl").write_text('{"text": "a b c"}\n{"prompt": "d e"}\n')
    assert load_prompts(tmp_path / "p.jsonl") == ["a b c", "d e"]
    (tmp_path / "bad.jsonl").write_text('{"x": 1}\n')
    with pytest.raises(RefEngineError, match="bad.jsonl:1"):
        load_prompts(tmp_path / "bad.jsonl")


def test_greedy_match_length():
    assert greedy_match_length([1, 2, 3], [1, 2, 4]) == 2
    assert greedy_match_length([1, 2], [1, 2]) == 2
    assert greedy_match_length([5], [1]) == 0


def test_sabotage_needs_fp8(ref):
    with pytest.raises(RefEngineError, match="needs an FP8 model"):
        sabotage_fp8_scales(ref, 4.0)
