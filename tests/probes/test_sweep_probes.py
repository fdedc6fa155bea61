"""Live: `llmbench sweep --probes ...` against the embedded engine writes probe series on the same
clock as the requests, says once that the gpu probe cannot run, and `llmdiag probe` records alone."""

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from llmbench.diag_cli import app
from probes.base import read_rows
from rundir import RunDir

ENV = {**os.environ, "COLUMNS": "200"}


@pytest.mark.slow  # ~17 s; .ci/run runs it (--runslow)
def test_sweep_with_probes_writes_aligned_series(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
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
            "0s",
            "--duration",
            "2s",
            "--request-timeout",
            "30s",
            "--concurrency",
            "2",
            "--probes",
            "gpu,server,host,irq,tcp",
            "--probe-interval",
            "0.5",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = RunDir(out)
    info = run.read_info()
    assert info.probes["gpu"].startswith("unavailable: no NVIDIA driver")
    assert all(info.probes[p] == "ok" for p in ("server", "host", "irq", "tcp"))
    assert proc.stdout.count("probe gpu cannot run here") == 1
    records = [r for r in run.iter_records() if r.status == "ok"]
    first_sent, last_done = min(r.t_sent for r in records), max(r.t_done for r in records)
    series = {p: read_rows(run.probe_file(p)) for p in ("server", "host", "irq", "tcp")}
    for name, rows in series.items():
        ts = [r["t"] for r in rows]
        assert ts == sorted(ts) and info.started <= ts[0] and ts[-1] <= info.finished, name
        # the series covers the requests on one clock: it starts before the first and ends after the last
        assert ts[0] <= first_sent and ts[-1] >= last_done - 0.6, name
    during = lambda rows: [r for r in rows if first_sent <= r["t"] <= last_done]
    assert any(r.get("running", 0) > 0 for r in during(series["server"]))
    assert sum(r.get("generation_tokens", 0) for r in series["server"]) >= 8 * len(records)
    assert any(r.get("conns", 0) >= 1 for r in during(series["tcp"]))
    assert sum(r["Tcp.OutSegs"] for r in series["tcp"]) > len(records)
    assert any(r.get("server_cpu_cores", 0) > 0.05 for r in during(series["host"]))
    cost = json.loads((out / "probes" / "_cost.json").read_text())
    assert set(cost) == {"server", "host", "irq", "tcp"}


def test_llmdiag_probe_records_alone(tmp_path):
    out = tmp_path / "probe-run"
    res = CliRunner().invoke(
        app,
        [
            "probe",
            "--probes",
            "host,irq,tcp,gpu,server",
            "--duration",
            "1.5s",
            "--interval",
            "0.25",
            "--pid",
            str(os.getpid()),
            "--out",
            str(out),
        ],
        env=ENV,
    )
    assert res.exit_code == 0, res.output
    info = RunDir(out).read_info()
    assert info.status == "complete" and info.target.kind == "external"
    assert info.probes["server"] == "unavailable: no target URL to scrape (give --target)"
    assert len(read_rows(out / "probes" / "host.jsonl")) >= 3
    assert read_rows(out / "probes" / "host.jsonl")[0]["server_pid"] == os.getpid()


def test_bad_probe_options_are_one_line_errors(tmp_path):
    res = CliRunner().invoke(app, ["probe", "--probes", "host,warp", "--out", str(tmp_path / "x")])
    assert res.exit_code == 2 and "unknown probe 'warp'" in res.output and "Traceback" not in res.output
    (tmp_path / "exists").mkdir()
    res = CliRunner().invoke(app, ["probe", "--probes", "host", "--out", str(tmp_path / "exists")])
    assert res.exit_code == 2 and "exists" in res.output
    res = CliRunner().invoke(app, ["probe", "--duration", "soon", "--out", str(tmp_path / "y")])
    assert res.exit_code != 0 and "--duration" in res.output
