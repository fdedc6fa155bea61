"""`llmdiag oom` and `llmdiag plan` as a user runs them (Typer's CliRunner, the real app)."""

from pathlib import Path

from typer.testing import CliRunner

from llmbench.diag_cli import app

LOGS = Path(__file__).resolve().parents[2] / "analyzers" / "oom" / "oom_logs"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def _row(out: str, label: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.startswith("│") and label in line)
    return [c.strip() for c in line.split("│") if c.strip()]


def test_oom_shows_the_seeds_whole_model_kv_beside_the_per_gpu_figures():
    r = invoke(
        "oom",
        "--model",
        "llama-3-70b",
        "--tp",
        "8",
        "--dtype",
        "fp16",
        "--max-model-len",
        "2048",
        "-c",
        "32",
        "--gpu-memory",
        "80GiB",
    )
    assert r.exit_code == 0, r.output
    assert _row(r.output, "per token") == ["per token", "320 KiB", "40 KiB"]
    assert _row(r.output, "per request of 2,048") == [
        "per request of 2,048 tokens (max_model_len)",
        "640 MiB",
        "80 MiB",
    ]
    assert _row(r.output, "32 concurrent requests") == ["32 concurrent requests of 2,048 tokens", "20 GiB", "2.50 GiB"]
    assert "80 GiB x 0.90" in r.output


def test_gpu_memory_takes_units():
    from analyzers.oom.units import parse_gpu_memory

    assert parse_gpu_memory("80") == parse_gpu_memory("80GiB") == parse_gpu_memory("80G") == 80.0
    assert abs(parse_gpu_memory("80GB") - 80e9 / 1024**3) < 1e-9 and parse_gpu_memory("24576MiB") == 24.0
    r = invoke("oom", "--model", "llama-3-8b", "--gpu-memory", "80GB")
    assert r.exit_code == 0 and "74.51 GiB x 0.90" in r.output, r.output
    bad = invoke("oom", "--model", "llama-3-8b", "--gpu-memory", "eighty")
    assert bad.exit_code == 2 and "80GiB" in bad.output


def test_a_model_is_named_from_its_config_not_its_folder(tmp_path):
    import json

    folder = tmp_path / "snapshots" / "5cc0ffe09ee49f7be6ca7c794ee6bd7245e84e60"
    folder.mkdir(parents=True)
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "_name_or_path": "meta-llama/Meta-Llama-3-8B",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 32,
        "intermediate_size": 14336,
        "vocab_size": 128256,
    }
    (folder / "config.json").write_text(json.dumps(cfg))
    r = invoke("oom", "--model", str(folder))
    assert r.exit_code == 0, r.output
    assert "meta-llama/Meta-Llama-3-8B (LlamaForCausalLM, llama, 8.03B)" in r.output and "5cc0ffe" not in r.output
    del cfg["_name_or_path"]
    (folder / "config.json").write_text(json.dumps(cfg))
    assert "LlamaForCausalLM (llama, 8.03B)" in invoke("oom", "--model", str(folder)).output


def test_oom_model_mode_prints_breakdown_verdict_fixes_and_playbook():
    r = invoke(
        "oom",
        "--model",
        "llama-3-70b",
        "--dtype",
        "fp16",
        "--max-model-len",
        "2048",
        "-c",
        "32",
        "--gpu-memory",
        "1000",
    )
    assert r.exit_code == 0, r.output
    out = r.output
    assert "KV cache: 2 x 80 layers x 8 KV heads x 128 x 2 B per token" in out
    assert "per request of 2,048 tokens: 128 blocks of 16 = 640.0 MiB per GPU; 32 requests need 20.00 GiB" in out
    assert "verdict: fits: 32 concurrent requests" in out and "fixes, in the seed's order" in out
    for part in (
        "weights",
        "activations (peak prefill)",
        "communication buffers",
        "CUDA context",
        "CUDA graphs",
        "fragmentation headroom",
        "KV cache (what is left)",
    ):
        assert part in out
    assert "oom.weights" in out and "passed" in out and "assumptions:" in out


def test_oom_model_mode_that_does_not_fit():
    r = invoke("oom", "--model", "llama-3-70b", "--tp", "4", "--max-model-len", "32768", "-c", "64")
    assert r.exit_code == 0, r.output
    assert "DOES NOT FIT" in r.output and "kv_cache_dtype=fp8" in r.output and "failed" in r.output


def test_oom_log_mode_explains_and_marks_fragmentation():
    r = invoke("oom", "--log", str(LOGS / "torch_new.log"))
    assert r.exit_code == 0, r.output
    assert "expandable_segments:True" in r.output
    assert "oom.fragmentation" in r.output and "reserved-but-unallocated 6.54 GiB vs 2.00 GiB" in r.output


def test_oom_log_garbage_is_one_clean_line():
    r = invoke("oom", "--log", str(LOGS / "garbage.log"))
    assert r.exit_code == 2
    assert "not an OOM message I know" in r.output and "Traceback" not in r.output


def test_oom_user_mistakes_are_one_line_errors():
    for args, message in (
        (("oom",), "give --model"),
        (("oom", "--model", "nope-13b"), "unknown model"),
        (("oom", "--ramp"), "--ramp needs --target"),
        (("oom", "--model", "llama-3-8b", "--tp", "3"), "TP 3 does not divide"),
        (("oom", "--log", "/no/such/file"), "is not a file"),
    ):
        r = invoke(*args)
        assert r.exit_code == 2, (args, r.output)
        assert message in r.output and "Traceback" not in r.output


def test_plan_ranks_candidates():
    r = invoke("plan", "--model", "llama-3-70b", "--nodes", "2", "-c", "600", "--no-quantize")
    assert r.exit_code == 0, r.output
    assert "1. one card: does not fit" in r.output
    assert "candidate plans, best first" in r.output and "TP8 PP2 bf16" in r.output
    first_row = next(line for line in r.output.splitlines() if line.split("│")[1:2] == ["  1 "])
    assert "TP8 PP2" in first_row and "32 MiB" in first_row


def test_help_texts_exist_for_every_option():
    for cmd in ("oom", "plan"):
        r = invoke(cmd, "--help")
        assert r.exit_code == 0
        assert "--model" in r.output and "--gpu-memory" in r.output
