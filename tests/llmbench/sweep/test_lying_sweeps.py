"""A sweep never reports a broken level as a measurement: a server frozen through the window start
(only warm-up requests saw it), a server that dies mid-level, a level with many errors, a port
where nothing listens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from refengine_proc import start_process

from analyzers.stats.summarize import summarize_level
from analyzers.stats.window import Window
from loadgen import LevelSpec, TargetSpec, level_workload_factory, run_level
from rundir import RunDir
from rundir.ports import free_port

DELAY = Path(__file__).resolve().parents[2] / "loadgen" / "delay_server.py"
ENV = {**os.environ, "COLUMNS": "200"}


def delay_server(*args: str):
    port = free_port()
    return start_process([sys.executable, str(DELAY), "--port", str(port), *args], port, quiet=True)


@pytest.mark.slow
def test_a_freeze_seen_only_by_warm_up_requests_is_a_stall_not_slo_met():
    proc, url = delay_server("--ttft-ms", "10", "--itl-ms", "5", "--freeze-at", "1.8", "--freeze-for", "6")
    try:
        spec = LevelSpec(
            "c4", concurrency=4, input_len=8, output_len=8, warmup_s=2.0, duration_s=8.0, request_timeout_s=30.0
        )
        records = []
        result = run_level(spec, TargetSpec(url, "m"), level_workload_factory(prompt_format="ids"), records.extend)
    finally:
        proc.kill()
        proc.wait()
    window = Window(result.window_end - result.window_start, result.window_start, result.window_end)
    in_window = [r for r in records if r.in_window and r.status == "ok"]
    assert in_window and max(r.ttft_s for r in in_window) < 1.0  # the window's own requests look fast
    lv = summarize_level(records, "c4", window, {"ttft_p99_s": 1.5, "tpot_p95_s": 0.05})
    assert lv.slo_met is False and lv.stall_s is not None and lv.stall_s > 4.0
    assert any("delivered no token" in b for b in lv.slo_broken)


@pytest.mark.slow
def test_a_server_that_dies_mid_level_ends_the_sweep_interrupted_with_no_verdict(tmp_path):
    proc, url = delay_server("--ttft-ms", "20", "--itl-ms", "5", "--die-after", "150")
    out = tmp_path / "run"
    try:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "llmbench.cli",
                "sweep",
                "--target",
                url,
                "--model",
                "m",
                "--concurrency",
                "2,4",
                "--input-len",
                "16",
                "--output-len",
                "8",
                "--warmup",
                "0.5s",
                "--duration",
                "20s",
                "--probes",
                "none",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=ENV,
        )
    finally:
        proc.kill()
        proc.wait()
    assert p.returncode == 3, p.stdout + p.stderr
    assert "stopped answering" in p.stdout and "--resume" in p.stdout
    info = RunDir(out).read_info()
    assert info.status == "interrupted" and info.levels_done == []
    level = json.loads((out / "summary.json").read_text())["levels"][0]
    assert level["slo_met"] is None and any("interrupted: measured" in b for b in level["slo_broken"])
    assert level["window_s"] < 20.0  # the part really measured
    assert "Highest load within the SLO: c" not in p.stdout


@pytest.mark.slow
def test_nothing_listening_is_could_not_connect_and_leaves_nothing(tmp_path):
    t0 = time.time()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmbench.cli",
            "sweep",
            "--target",
            f"http://127.0.0.1:{free_port()}",
            "--concurrency",
            "1",
            "--out",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
    )
    assert p.returncode == 1 and "could not connect" in p.stdout and time.time() - t0 < 30
    assert not (tmp_path / "r").exists()


@pytest.mark.slow  # ~10 s, a second guard of a path another default test covers; .ci/run runs it
def test_bad_options_are_one_line_and_create_nothing(tmp_path):
    for args, words in (
        (["--concurrency", "1,,8"], "comma-separated"),
        (["--concurrency", ""], "comma-separated"),
        (["--target", "127.0.0.1:8000"], "must be a URL"),
        (["--slo-ttft", "-1"], "positive"),
        (["--workload", "nope"], "--workload must be one of"),
        (["--workload", "sharegpt", "--dataset", str(tmp_path / "missing.json")], "no such file"),
        (["--endpoint", "foo"], "completions or chat"),
        (["--prompt-format", "bytes"], "text, ids"),
    ):
        p = subprocess.run(
            [sys.executable, "-m", "llmbench.cli", "sweep", *args, "--out", str(tmp_path / "r")],
            capture_output=True,
            text=True,
            timeout=60,
            env=ENV,
        )
        out = p.stdout + p.stderr
        assert p.returncode == 2 and words in out and "Traceback" not in out, (args, out)
        assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_bug_in_the_analysis_costs_no_measurement(tmp_path, monkeypatch):
    """summary_of_levels raising after each level (as a knee beside a level without a rate once did):
    the sweep says so in one line, measures every level, ends complete, and the report (which
    summarizes from disk) still comes out."""
    from typer.testing import CliRunner

    import llmbench.sweep.run as sweep_run
    from llmbench.cli import app

    def broken(*a, **k):
        raise TypeError("unsupported format string passed to NoneType.__format__")

    monkeypatch.setattr(sweep_run, "summary_of_levels", broken)
    proc, url = delay_server("--ttft-ms", "10", "--itl-ms", "5")
    out = tmp_path / "run"
    try:
        args = ["sweep", "--target", url, "--model", "m", "--concurrency", "1,2", "--input-len", "16"]
        args += ["--output-len", "8", "--warmup", "0.5s", "--duration", "2s", "--probes", "none", "--out", str(out)]
        r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    finally:
        proc.kill()
        proc.wait()
    assert r.exit_code == 0, r.output
    assert "could not summarize the levels so far (TypeError" in r.output and "llmbench report" in r.output
    info = RunDir(out).read_info()
    assert info.status == "complete" and info.levels_done == ["c1-in16-out8", "c2-in16-out8"]
    assert (out / "report.html").exists()
