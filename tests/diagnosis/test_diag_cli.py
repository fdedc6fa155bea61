"""`llmdiag oom` and `llmdiag plan` as a user runs them (Typer's CliRunner, the real app)."""

from pathlib import Path

from typer.testing import CliRunner

from llmbench.diag_cli import app

LOGS = Path(__file__).parent / "oom_logs"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_oom_model_mode_prints_breakdown_verdict_fixes_and_playbook():
    r = invoke("oom", "--model", "llama-3-70b", "--dtype", "fp16", "--max-model-len", "2048", "-c", "32",
               "--gpu-memory", "1000")
    assert r.exit_code == 0, r.output
    out = r.output
    assert "KV per token: 320 KiB for the model (2 x 80 layers x 8 KV heads x 128 x 2 B)" in out
    assert "per request of 2,048 tokens: 128 blocks of 16 = 640.0 MiB per GPU; 32 requests need 20.00 GiB" in out
    assert "verdict: fits: 32 concurrent requests" in out and "fixes, in the seed's order" in out
    for part in ("weights", "activations (peak prefill)", "communication buffers", "CUDA context", "CUDA graphs",
                 "fragmentation headroom", "KV cache (what is left)"):
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
    for args, message in ((("oom",), "give --model"), (("oom", "--model", "nope-13b"), "unknown model"),
                          (("oom", "--ramp"), "--ramp needs --target"),
                          (("oom", "--model", "llama-3-8b", "--tp", "3"), "TP 3 does not divide"),
                          (("oom", "--log", "/no/such/file"), "is not a file")):
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
