"""`llmbench sweep --data-parallel-size 2`: the embedded engine as a fleet of two replicas behind
its front; run.json says so and every answered request names its replica."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from refengine_proc import refengine_server
from typer.testing import CliRunner

from llmbench.cli import app
from rundir import RunDir


@pytest.mark.slow  # two replicas to start, then a level: ~40 s on two cores
def test_a_sweep_through_the_fleet_records_the_replica_of_every_request(tmp_path):
    out = tmp_path / "run"
    cmd = [
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
        "--concurrency",
        "2",
        "--probes",
        "server",
        "--probe-interval",
        "0.5",
        "--data-parallel-size",
        "2",
        "--lb-policy",
        "least-outstanding",
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=280, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = RunDir(out)
    info = run.read_info()
    assert info.target.replicas == 2 and info.target.replica_header == "x-llmbench-replica"
    assert info.target.lb_policy == "least-outstanding" and info.target.replica_metrics == []  # the front's page
    assert "engine" not in info.target.engine_facts["cache_config"]  # one replica's facts, no label
    answered = [
        r for r in run.iter_records() if r.http_status is not None
    ]  # a request cut before it was answered has none
    assert answered and all(r.status in ("ok", "cancelled") for r in answered)
    assert {r.replica for r in answered} == {"0", "1"}
    assert "replica" in json.loads(run.requests_jsonl.read_text().splitlines()[0])
    shares = run.read_summary()["replicas"]  # per level and replica, in the report too
    assert [s["replica"] for s in shares] == ["0", "1"]
    assert sum(s["request_share"] for s in shares) == pytest.approx(1.0)
    assert all(s["requests"] > 0 and s["ttft_p99_s"] > 0 for s in shares)
    report = (out / "report.html").read_text()
    assert 'id="replica-table"' in report and "running requests per replica" in report
    rows = [json.loads(line) for line in (out / "probes" / "server.jsonl").read_text().splitlines()]
    assert any(set(r.get("per_engine", {})) == {"0", "1"} for r in rows)


def test_data_parallel_size_with_an_external_target_is_a_user_error(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "llmbench.cli",
        "sweep",
        "--target",
        "http://127.0.0.1:9",
        "--data-parallel-size",
        "2",
        "--out",
        str(tmp_path / "run"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2 and "--data-parallel-size" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow  # two servers, then a level: ~30 s on two cores
def test_a_sweep_over_two_urls_sends_to_each_in_turn(tmp_path):
    out = tmp_path / "run"
    with refengine_server(model="tiny-test") as (_, a), refengine_server(model="tiny-test") as (_, b):
        cmd = [
            sys.executable,
            "-m",
            "llmbench.cli",
            "sweep",
            "--target",
            f"{a},{b}/v1",
            "--input-len",
            "16",
            "--output-len",
            "8",
            "--warmup",
            "1s",
            "--duration",
            "3s",
            "--concurrency",
            "2",
            "--probes",
            "server",
            "--probe-interval",
            "0.5",
            "--out",
            str(out),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=280, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = RunDir(out)
    info = run.read_info()
    assert info.target.url == a and info.target.urls == [a, f"{b}/v1"] and info.target.replicas == 2
    assert info.target.lb_policy == "round-robin" and info.target.replica_metrics == [f"{a}/metrics", f"{b}/metrics"]
    sent = [r for r in run.iter_records() if r.status == "ok"]
    assert {r.replica for r in sent} == {"0", "1"}  # each URL's index, as the probe's per_engine keys
    shares = {s["replica"]: s["request_share"] for s in run.read_summary()["replicas"]}
    assert set(shares) == {"0", "1"} and all(0.3 < v < 0.7 for v in shares.values())
    rows = [json.loads(line) for line in (out / "probes" / "server.jsonl").read_text().splitlines()]
    assert any(set(r.get("per_engine", {})) == {"0", "1"} for r in rows) and info.probes["server"] == "ok"
    report = (out / "report.html").read_text()
    assert "running requests per replica" in report and f"0 ({a})" in report  # the panels and the table


@pytest.mark.slow  # a whole sweep (preflight, calibration, a level, the report): ~10 s, more on a busy machine
def test_the_client_balances_two_targets_least_outstanding_and_run_json_says_so(tmp_path, slot_server):
    a, b = slot_server(slots=4, prefill_ms=5, itl_ms=2), slot_server(slots=4, prefill_ms=5, itl_ms=2)
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmbench.cli",
            "sweep",
            "--target",
            f"{a.url},{b.url}",
            "--lb-policy",
            "least-outstanding",
            "--input-len",
            "8",
            "--output-len",
            "4",
            "--warmup",
            "0.2s",
            "--duration",
            "1s",
            "--concurrency",
            "2",
            "--probes",
            "none",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    info = RunDir(out).read_info()
    assert info.target.lb_policy == "least-outstanding"
    assert info.target.replica_metrics == [f"{a.url}/metrics", f"{b.url}/metrics"]
    assert {r.replica for r in RunDir(out).iter_records() if r.status == "ok"} == {"0", "1"}


@pytest.mark.parametrize(
    "options,words",
    [
        (
            "--target http://127.0.0.1:9,http://127.0.0.1:10 --lb-policy fastest",
            "must be one of round-robin, least-outstanding, got 'fastest'",
        ),
        ("--target http://127.0.0.1:9 --lb-policy least-outstanding", "only for a fleet we drive"),
        ("--lb-policy least-outstanding", "only for a fleet we drive"),
        (
            "--target http://127.0.0.1:9,http://127.0.0.1:10 --replica-metrics http://127.0.0.1:11/metrics",
            "one page per replica: 1 pages for 2 replicas",
        ),
        ("--target http://127.0.0.1:9 --replica-metrics http://127.0.0.1:11,127.0.0.1:12", "must be URLs"),
        ("--data-parallel-size 2 --replica-metrics http://127.0.0.1:11,http://127.0.0.1:12", "bundled fleet's front"),
    ],
)
def test_a_bad_lb_policy_or_replica_metrics_is_one_line_and_no_run(tmp_path, options, words):
    # In process (the same Typer app the console script runs): these fail before anything starts.
    r = CliRunner().invoke(app, ["sweep", *options.split(), "--out", str(tmp_path / "run")], env={"COLUMNS": "200"})
    assert r.exit_code == 2 and words in r.output and "Traceback" not in r.output
    assert "--lb-policy" in r.output or "--replica-metrics" in r.output
    assert not (tmp_path / "run").exists()


def test_the_embedded_fleets_front_is_started_with_the_policy():
    from llmbench.sweep.embedded import EmbeddedServer

    command = EmbeddedServer("tiny", data_parallel_size=2, lb_policy="least-outstanding").command
    assert command[command.index("--lb-policy") + 1] == "least-outstanding"
    assert "--lb-policy" not in EmbeddedServer("tiny", data_parallel_size=2).command  # the front's default


@pytest.mark.slow  # ~4 s each (a CLI process); .ci/run runs the file (the default suite keeps under 10 minutes)
@pytest.mark.parametrize(
    "targets,words",
    [
        ("http://127.0.0.1:9,127.0.0.1:10", "must be a URL"),
        ("http://127.0.0.1:9,http://127.0.0.1:9/", "listed twice"),
        ("http://127.0.0.1:9,http://127.0.0.1:10 --replicas 3", "--replicas"),
    ],
)
def test_a_bad_url_list_is_a_user_error(tmp_path, targets, words):
    proc = subprocess.run(
        [sys.executable, "-m", "llmbench.cli", "sweep", "--target", *targets.split(), "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()
