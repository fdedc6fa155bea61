"""A real sweep (bundled engine, tiny-test model) writes its report at the end; an interrupted one
too; `llmbench report` regenerates either; a run compared with itself is within noise."""

import os
import signal
import subprocess
import sys
import time

import pytest

from rundir import RunDir

SWEEP = [
    sys.executable,
    "-m",
    "llmbench.cli",
    "sweep",
    "--model",
    "tiny-test",
    "--input-len",
    "16",
    "--output-len",
    "8",
    "--warmup",
    "1s",
    "--duration",
    "3s",
    "--request-timeout",
    "30s",
    "--probes",
    "none",
]
ENV = {**os.environ, "COLUMNS": "200"}

pytestmark = pytest.mark.slow


def test_sweep_writes_report_and_report_regenerates(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        SWEEP + ["--concurrency", "1,2", "--out", str(out)], capture_output=True, text=True, timeout=300, env=ENV
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    html = (out / "report.html").read_text()
    assert 'id="summary-table"' in html and "c2-in16-out8" in html and html.lower().count("<script") == 1  # ours
    first = RunDir(out).read_summary()
    (out / "report.html").unlink()
    proc = subprocess.run(
        [sys.executable, "-m", "llmbench.cli", "report", str(out)], capture_output=True, text=True, timeout=120, env=ENV
    )
    assert proc.returncode == 0 and (out / "report.html").is_file(), proc.stdout + proc.stderr
    again = RunDir(out).read_summary()
    for a, b in zip(first["levels"], again["levels"]):  # the sweep's summary and the report's agree
        assert (a["n_ok"], a["ttft"]["p"], a["output_tok_s"]) == (b["n_ok"], b["ttft"]["p"], b["output_tok_s"])
    proc = subprocess.run(
        [sys.executable, "-m", "llmbench.cli", "compare", str(out), str(out), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    said = " ".join(proc.stdout.split())
    assert proc.returncode == 0 and "B vs A: 0 better, 0 worse" in said, proc.stdout


def test_interrupted_sweep_still_has_a_report(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        SWEEP + ["--concurrency", "1,2", "--duration", "4s", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=ENV,
    )
    run = RunDir(out)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (run.exists() and run.read_info().levels_done):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    assert run.read_info().status == "interrupted", output
    html = (out / "report.html").read_text()
    assert "interrupted" in html and "c1-in16-out8" in html
