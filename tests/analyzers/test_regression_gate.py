"""The CI gate of `llmbench compare --fail-on-regression`: a significant slowdown beyond the
tolerance fails the build with a one-line reason (exit 1), noise and small changes never do, and
the result reaches CI as JSON, JUnit XML and a GitHub step summary."""

import json
import os
import subprocess
import sys
from xml.etree import ElementTree as ET

import numpy as np
import pytest
from synth_run import make_run, rec

from analyzers.compare import compare_runs
from analyzers.regression import parse_tolerance, regression_gate
from analyzers.summary import analyze_run


def _records(scale: float = 1.0, seed: int = 7):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(300):
        ttft = 0.05 + rng.exponential(0.2)
        tpot = 0.01 + rng.exponential(0.01)
        out.append(rec(i * 0.03, ttft * scale, (ttft + 10 * tpot) * scale, 11, level="c4", concurrency=4))
    return out


def _run(path, records):
    return make_run(path, records, {"c4": (0, 9)})


def test_tolerances_are_percentages_or_fractions():
    assert parse_tolerance("5%") == pytest.approx(0.05) and parse_tolerance("0.1") == pytest.approx(0.1)
    for bad in ("five", "-5%", ""):
        with pytest.raises(ValueError, match="tolerance"):
            parse_tolerance(bad)


def test_a_significant_slowdown_beyond_the_tolerance_is_a_regression(tmp_path):
    a, b = analyze_run(_run(tmp_path / "a", _records())), analyze_run(_run(tmp_path / "b", _records(scale=2.0)))
    gate = regression_gate([compare_runs(a, b)], 0.05)
    assert gate.failed and {r.metric for r in gate.regressions} == {"TTFT P99", "TPOT P95"}
    assert all(r.rel == pytest.approx(1.0, rel=1e-3) and r.ci[0] > 0 for r in gate.regressions)
    assert not regression_gate([compare_runs(a, b)], 1.5).failed  # +100% is within a 150% tolerance
    assert not regression_gate([compare_runs(b, a)], 0.05).failed  # faster is never a regression


def test_noise_never_fails_the_build(tmp_path):
    a = analyze_run(_run(tmp_path / "a", _records(seed=7)))
    b = analyze_run(_run(tmp_path / "b", _records(seed=8)))  # the same server, other draws
    gate = regression_gate([compare_runs(a, b)], 0.0)
    assert gate.checked == 3 and not gate.failed, gate.regressions


@pytest.mark.slow
def test_the_cli_gate_exits_1_with_one_line_and_writes_junit_json_and_summary(tmp_path):
    _run(tmp_path / "a", _records())
    _run(tmp_path / "b", _records(scale=2.0))
    summary = tmp_path / "summary.md"
    env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary), "COLUMNS": "80"}
    cmd = [
        sys.executable,
        "-m",
        "llmbench.cli",
        "compare",
        str(tmp_path / "a"),
        str(tmp_path / "b"),
        "--out",
        str(tmp_path / "cmp"),
        "--fail-on-regression",
        "5%",
        "--json",
        "--junit",
        str(tmp_path / "gate.xml"),
        "--github-summary",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    reason = [line for line in proc.stderr.splitlines() if line.startswith("regression beyond 5%")]
    assert len(reason) == 1 and "c4" in reason[0] and "+100.0%" in reason[0], proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["gate"]["failed"] and len(doc["gate"]["regressions"]) == 2 and doc["comparisons"][0]["levels"]
    suite = ET.parse(tmp_path / "gate.xml").getroot().find("testsuite")
    assert suite.get("tests") == "3" and suite.get("failures") == "2"
    assert "FAILED" in summary.read_text()
    ok = subprocess.run(cmd[:-5] + ["150%"], capture_output=True, text=True, env=env, timeout=300)
    assert ok.returncode == 0 and "no regression beyond 150%" in ok.stdout, ok.stdout + ok.stderr
    bad = subprocess.run(cmd[:-5] + ["lots"], capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_a_percentile_that_reached_failed_requests_fails_the_gate(tmp_path):
    """B timed out on 5% of its requests: its TTFT P99 is unbounded, a regression beyond any tolerance."""
    a = analyze_run(_run(tmp_path / "a", _records()))
    recs = _records()
    for r in recs[::20]:
        r.status, r.t_first_token, r.t_done, r.error = "timeout", None, r.t_sent + 3.0, "timed out"
        r.ttft_s = r.tpot_s = None
        r.itl_s, r.completion_tokens = [], None
    b = analyze_run(_run(tmp_path / "b", recs))
    gate = regression_gate([compare_runs(a, b)], 10.0)
    unbounded = [r for r in gate.regressions if r.b is None]
    assert gate.failed and any(r.metric == "TTFT P99" for r in unbounded), gate.regressions
