"""`llmbench sweep --target` against servers we did not write: a strict text-only server that
refuses unknown fields and counts tokens its own way, a server that refuses everything, one that
starts refusing mid-sweep, and our own server reached as a stranger would (no --model, no
--tokenizer). transformers serve, a real foreign server, is in test_transformers_serve.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from refengine_proc import refengine_server, start_process

from rundir import RunDir
from rundir.ports import free_port

HERE = Path(__file__).resolve().parent
STRICT = HERE.parent / "loadgen" / "strict_server.py"
ENV = {**os.environ, "COLUMNS": "200"}
SHORT = ["--warmup", "1s", "--duration", "2s", "--request-timeout", "30s", "--probes", "none"]


def sweep(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "llmbench.cli", "sweep", *args], capture_output=True, text=True, timeout=timeout, env=ENV
    )


def strict_server(*args: str):
    port = free_port()
    return start_process([sys.executable, str(STRICT), "--port", str(port), *args], port, quiet=True)


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def strict():
    proc, url = strict_server("--eos-after", "5")
    yield url
    proc.kill()
    proc.wait()


# ~13 s per endpoint (a strict server started per test): slow, both run by .ci/run.
@pytest.mark.slow
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_strict_text_only_server_is_measured_on_both_endpoints(strict, tmp_path, endpoint):
    out = tmp_path / endpoint
    p = sweep(
        "--target",
        strict,
        "--endpoint",
        endpoint,
        "--concurrency",
        "2",
        "--input-len",
        "40,300",
        "--input-len-spread",
        "0.3",
        "--output-len",
        "8",
        "--out",
        str(out),
        *SHORT,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    recs = [r for r in records(out) if r["status"] != "cancelled"]
    assert recs and all(r["status"] == "ok" for r in recs), {r["error"] for r in recs}
    # prompt lengths land within ±5% of the request by the server's own count
    for r in recs:
        assert abs(r["prompt_tokens"] - r["target_input_len"]) <= 0.05 * r["target_input_len"], r
    assert len({r["target_input_len"] for r in recs}) > 4  # the spread was honoured
    info = RunDir(out).read_info()
    assert info.target.model == "strict-model"  # from /v1/models
    assert "ignore_eos" in info.target.omit_fields
    dropped = [a for a in info.target.adaptations if a["field"] == "ignore_eos"]
    assert dropped and "Unexpected fields" in dropped[0]["reason"] and "not enforced" in dropped[0]["consequence"]
    assert info.sweep.workload.prompt_format == "text"
    # the server stopped at "EOS" after 5 tokens: achieved lengths, and TPOT over the real count
    assert all(r["completion_tokens"] == 5 for r in recs)
    summary = json.loads((out / "summary.json").read_text())
    assert any("did not get the requested 8 output tokens" in n for lv in summary["levels"] for n in lv["notes"])
    assert "ignore_eos dropped" in p.stdout


@pytest.mark.slow  # ~10 s; .ci/run runs it (the default suite keeps under 10 minutes)
def test_token_id_prompts_switch_to_text_and_strict_refuses_to_adapt(strict, tmp_path):
    from refengine.model.tiny import resolve_model

    tok = str(resolve_model("tiny-test"))
    out = tmp_path / "ids"
    p = sweep(
        "--target",
        strict,
        "--prompt-format",
        "ids",
        "--tokenizer",
        tok,
        "--concurrency",
        "1",
        "--input-len",
        "50",
        "--output-len",
        "4",
        "--out",
        str(out),
        *SHORT,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    info = RunDir(out).read_info()
    assert info.sweep.workload.prompt_format == "text"
    assert any(a["field"] == "prompt" and a["action"] == "switched to text" for a in info.target.adaptations)
    assert all(r["prompt_tokens"] == 50 for r in records(out) if r["status"] == "ok")
    p = sweep("--target", strict, "--strict", "--concurrency", "1", "--out", str(tmp_path / "strict"), *SHORT)
    assert p.returncode == 1 and "--strict" in p.stdout and "ignore_eos" in p.stdout
    assert not (tmp_path / "strict").exists()


@pytest.mark.slow
def test_a_server_that_refuses_everything_stops_the_sweep_at_once(tmp_path):
    proc, url = strict_server("--refuse-all", "this deployment is paused")
    try:
        t0 = time.time()
        p = sweep("--target", url, "--concurrency", "4", "--out", str(tmp_path / "r"), *SHORT)
        assert time.time() - t0 < 30
        assert p.returncode != 0 and "this deployment is paused" in p.stdout and "Traceback" not in p.stdout + p.stderr
        assert not (tmp_path / "r").exists()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_a_level_whose_requests_all_fail_stops_the_sweep_resumable(tmp_path):
    # The preflight and the calibration pass (the first 200 requests); then every request is refused.
    proc, url = strict_server("--refuse-all", "quota exhausted", "--refuse-after", "200")
    try:
        out = tmp_path / "r"
        t0 = time.time()
        p = sweep(
            "--target",
            url,
            "--concurrency",
            "8",
            "--input-len",
            "8",
            "--output-len",
            "2",
            "--warmup",
            "0s",
            "--duration",
            "30s",
            "--request-timeout",
            "30s",
            "--probes",
            "none",
            "--out",
            str(out),
        )
        assert time.time() - t0 < 60, "the level should stop long before its 30 s window"
        assert p.returncode == 1 and "quota exhausted" in p.stdout and "--resume" in p.stdout
        info = RunDir(out).read_info()
        assert info.status == "interrupted" and info.levels_done == []
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow  # ~20 s; .ci/run runs it
def test_our_server_reached_as_a_stranger_has_no_failed_requests(tmp_path):
    with refengine_server() as (_, url):
        out = tmp_path / "own"
        p = sweep(
            "--target",
            url,
            "--concurrency",
            "2",
            "--input-len",
            "20,90",
            "--output-len",
            "4",
            "--out",
            str(out),
            *SHORT,
        )
        assert p.returncode == 0, p.stdout + p.stderr
        recs = [r for r in records(out) if r["status"] != "cancelled"]
        assert recs and all(r["status"] == "ok" for r in recs)
        # no tokenizer given: the server's own count sized the prompts (within a word of 3 tokens)
        assert all(
            abs(r["prompt_tokens"] - r["target_input_len"]) <= max(2, 0.05 * r["target_input_len"]) for r in recs
        )
        assert RunDir(out).read_info().target.model == "tiny-test"


def test_the_kv_ramp_asks_for_metrics_before_it_spends_a_request():
    """A server without /metrics (llama.cpp's, this strict one) is told in one line before the
    preflight: here every request would be refused, and that refusal must not hide the reason the
    ramp cannot run at all."""
    proc, url = strict_server("--refuse-all", "this deployment is paused")
    try:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "llmbench.diag_cli",
                "oom",
                "--ramp",
                "--target",
                url,
                "--ramp-levels",
                "1",
                "--level-seconds",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=ENV,
        )
        said = p.stdout + p.stderr
        assert p.returncode == 2, said
        assert "/metrics answered HTTP 404" in said and "does not export" in said, said
        assert "paused" not in said and "Traceback" not in said
    finally:
        proc.kill()
        proc.wait()
