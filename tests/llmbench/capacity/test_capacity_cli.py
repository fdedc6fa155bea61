"""`llmbench capacity` takes the sweep's target options, with the same checks: a fleet's balancing
(--lb-policy) and its replicas' pages (--replica-metrics) are refused in one line, before any run."""

from __future__ import annotations

from typer.testing import CliRunner

from llmbench.cli import app


def test_a_bad_lb_policy_is_one_line_and_no_run(tmp_path):
    r = CliRunner().invoke(
        app,
        [
            "capacity",
            "--target",
            "http://127.0.0.1:9,http://127.0.0.1:10",
            "--lb-policy",
            "random",
            "--out",
            str(tmp_path / "run"),
        ],
        env={"COLUMNS": "200"},
    )
    assert r.exit_code == 2 and "--lb-policy" in r.output and "got 'random'" in r.output
    assert "Traceback" not in r.output and not (tmp_path / "run").exists()


def test_replica_metrics_for_the_bundled_fleet_is_refused(tmp_path):
    r = CliRunner().invoke(
        app,
        [
            "capacity",
            "--data-parallel-size",
            "2",
            "--replica-metrics",
            "http://127.0.0.1:11,http://127.0.0.1:12",
            "--out",
            str(tmp_path / "run"),
        ],
        env={"COLUMNS": "200"},
    )
    assert r.exit_code == 2 and "--replica-metrics" in r.output and "bundled fleet's front" in r.output
    assert not (tmp_path / "run").exists()
