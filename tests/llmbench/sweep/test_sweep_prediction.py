"""`llmbench sweep --profile` and `llmbench report RUN --profile`: a real two-level sweep of the embedded
tiny-test, predicted from a profile `llmdiag calibrate` measured here; the prediction lands in the run
directory, the report shows predicted beside measured, and a level beyond the model's band is a finding
while one within it is not. No timing is asserted: the departures forced here are threefold."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from analyzers.plan.profile import LinearCost, MachineProfile
from llmbench.cli import app as llmbench_app
from llmbench.diag_cli import app as llmdiag_app
from rundir import RunDir
from rundir.prediction import PREDICTED_METRICS

# A real two-level sweep and a calibration set up the module (~40 s on 2 cores): slow, run by .ci/run.
pytestmark = pytest.mark.slow

ENV = {**os.environ, "COLUMNS": "200"}
runner = CliRunner()


def llmbench(*args):
    return runner.invoke(llmbench_app, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """(a run swept with --profile, the sweep's output, the calibrated profile's path)."""
    tmp = tmp_path_factory.mktemp("predicted")
    profile = tmp / "here.json"
    r = runner.invoke(llmdiag_app, ["calibrate", "--quick", "--no-comm", "--out", str(profile)])
    assert r.exit_code == 0, r.output
    out = tmp / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmbench.cli",
            "sweep",
            "--model",
            "tiny-test",
            "--concurrency",
            "1,4",
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
            "--out",
            str(out),
            "--profile",
            str(profile),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out, proc.stdout, profile


@pytest.fixture
def run_copy(swept, tmp_path):
    """The swept run, copied: each test re-predicts it on its own."""
    shutil.copytree(swept[0], tmp_path / "run")
    return RunDir(tmp_path / "run")


def _prediction(run: RunDir) -> dict:
    return json.loads(run.summary_json.read_text())["prediction"]


def test_the_sweep_stores_the_prediction_and_shows_it_beside_the_measurement(swept):
    out, stdout, _ = swept
    run = RunDir(out)
    info = run.read_info()
    record = run.read_prediction()
    assert record is not None and record.scope == "this_machine" and record.profile.source == "measured"
    assert [lv.level_id for lv in record.levels] == info.levels_done == ["c1-in16-out8", "c4-in16-out8"]
    assert all(lv.metrics()[k] > 0 for lv in record.levels for k in PREDICTED_METRICS)
    assert record.engine["max_num_seqs"] > 0
    # the terminal: the profile's scope, then predicted / measured per level
    assert 'Predicted from the profile "this machine"' in stdout and "predicted / measured (departure)" in stdout
    assert "c4-in16-out8" in stdout.split("predicted / measured")[1]
    # summary.json and the HTML report: both columns, for every level
    checked = _prediction(run)
    assert [lv["level_id"] for lv in checked["levels"]] == info.levels_done
    for lv in checked["levels"]:
        for c in lv["checks"]:
            assert c["predicted"] > 0 and c["measured"] > 0 and c["departure"] is not None
    html = run.report_html.read_text()
    assert 'id="prediction-table"' in html and "TPOT P50 ms predicted" in html and "TPOT P50 ms measured" in html
    assert "Predicted vs measured" in run.report_md.read_text()


@pytest.fixture(scope="module")
def fitted(swept):
    """The calibrated profile fitted to the run itself (the planner's own --fit): within its error band."""
    out, _, calibrated = swept
    path = out.parent / "fitted.json"
    r = runner.invoke(
        llmdiag_app,
        [
            "plan",
            "--predict-sweep",
            str(out),
            "--profile",
            str(calibrated),
            "--fit",
            "all",
            "--save-profile",
            str(path),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    return path


def _faster(p: MachineProfile, k: float) -> MachineProfile:
    """The same machine claimed k times faster: every operator, step and request overhead over k."""
    ov = p.step_overhead
    return dataclasses.replace(
        p,
        compute_scale=p.compute_scale / k,
        step_overhead=LinearCost(ov.fixed_s / k, ov.per_unit_s / k, ov.lo, ov.hi),
        request_overhead_s=p.request_overhead_s / k,
        request_overhead_per_running_s=p.request_overhead_per_running_s / k,
        request_overhead_per_prompt_token_s=p.request_overhead_per_prompt_token_s / k,
    )


def test_a_profile_three_times_too_fast_is_a_finding_at_every_level(fitted, run_copy, tmp_path):
    r = llmbench("report", run_copy.path, "--profile", fitted)
    assert r.exit_code == 0, r.output
    assert _prediction(run_copy)["fitted_here"] and "fitted to this very run" in r.output
    # (no claim that the fitted profile finds nothing: on a shared machine a level can truly depart)

    _faster(MachineProfile.load(fitted), 3.0).save(tmp_path / "fast.json")
    r = llmbench("report", run_copy.path, "--profile", tmp_path / "fast.json")
    assert r.exit_code == 0, r.output
    departures = _prediction(run_copy)["departures"]
    tpot = [d for d in departures if d["metric"] == "tpot_p50_s"]
    assert [d["level_id"] for d in tpot] == ["c1-in16-out8", "c4-in16-out8"]
    assert all(d["slower"] and d["departure"] > d["band"] for d in tpot)
    # One finding per metric that departs at every level, not one per level: the offset is the run's.
    assert r.output.count("Finding: TPOT P50") == 1
    assert "TPOT P50 above what this machine's profile predicts at every level, 2 of 2" in r.output
    assert "something outside the model slows every step" in r.output
    html = run_copy.report_html.read_text()
    metrics = {(d["metric"], d["slower"]) for d in departures}
    assert html.count('data-kind="prediction_departure"') == len(metrics) < len(departures)
    assert "above what this machine&#39;s profile predicts at every level" in html


def test_one_level_slowed_beyond_the_band_is_the_only_finding(fitted, run_copy):
    """A prediction 20% off the measurement everywhere (within the band), except c4's TPOT P50,
    predicted three times faster than measured (as if something slowed c4 alone): c4's TPOT is the
    one finding."""
    assert llmbench("report", run_copy.path, "--profile", fitted).exit_code == 0
    record = run_copy.read_prediction()
    measured = {lv["level_id"]: lv for lv in _prediction(run_copy)["levels"]}
    for lv in record.levels:
        for c in measured[lv.level_id]["checks"]:
            setattr(lv, c["metric"], c["measured"] * 1.2)
    c4_tpot = next(c for c in measured["c4-in16-out8"]["checks"] if c["metric"] == "tpot_p50_s")
    record.level("c4-in16-out8").tpot_p50_s = c4_tpot["measured"] / 3
    run_copy.write_prediction(record)
    r = llmbench("report", run_copy.path)  # no --profile: the stored prediction is shown
    assert r.exit_code == 0, r.output
    departures = _prediction(run_copy)["departures"]
    assert [(d["level_id"], d["metric"]) for d in departures] == [("c4-in16-out8", "tpot_p50_s")]
    assert r.output.count("Finding:") == 1 and "200% above" in r.output and "at concurrency 4" in r.output


def test_a_healthy_runs_spread_is_no_finding_and_a_tripled_ttft_is(fitted, run_copy):
    """Every level 70% slower than predicted (a spread healthy runs reach: bench/RESULTS.md,
    departure_bands) is no finding, nor is a TTFT P99 five times its prediction (a tail); c4's TTFT
    P50 at three times its prediction is the one finding, said as a TTFT."""
    assert llmbench("report", run_copy.path, "--profile", fitted).exit_code == 0
    record = run_copy.read_prediction()
    measured = {
        lv["level_id"]: {c["metric"]: c["measured"] for c in lv["checks"]} for lv in _prediction(run_copy)["levels"]
    }
    for lv in record.levels:
        m = measured[lv.level_id]
        for metric, k in (
            ("ttft_p50_s", 1 / 1.7),
            ("tpot_p50_s", 1 / 1.7),
            ("tpot_p95_s", 1 / 1.7),
            ("ttft_p99_s", 0.2),
        ):
            setattr(lv, metric, m[metric] * k)
        if m["output_tok_s"] is not None:
            lv.output_tok_s = m["output_tok_s"] * 1.7
    record.level("c4-in16-out8").ttft_p50_s = measured["c4-in16-out8"]["ttft_p50_s"] / 3
    run_copy.write_prediction(record)
    r = llmbench("report", run_copy.path)
    assert r.exit_code == 0, r.output
    departures = _prediction(run_copy)["departures"]
    assert [(d["level_id"], d["metric"]) for d in departures] == [("c4-in16-out8", "ttft_p50_s")]
    assert r.output.count("Finding:") == 1 and "TTFT P50 200% above" in r.output


def test_a_profile_of_another_machine_or_an_external_target_says_so_once(run_copy, swept):
    r = llmbench("report", run_copy.path, "--profile", "h100")
    assert r.exit_code == 0, r.output
    assert run_copy.read_prediction().scope == "other_machine"
    assert r.output.count("is not this machine's") == 1 and "Finding:" not in r.output
    assert _prediction(run_copy)["departures"] == []  # an H100's speed says nothing about this run

    info = run_copy.read_info()
    info.target.kind, info.target.url = "external", "http://127.0.0.1:9"
    run_copy.write_info(info)
    r = llmbench("report", run_copy.path, "--profile", swept[2])
    assert r.exit_code == 0, r.output
    assert run_copy.read_prediction().scope == "assumed"
    assert r.output.count("is an assumption about the hardware serving it") == 1


def test_a_profile_that_does_not_read_is_one_line_before_anything_runs(tmp_path):
    out = tmp_path / "run"
    r = llmbench("sweep", "--model", "tiny-test", "--concurrency", "1", "--out", out, "--profile", tmp_path / "no.json")
    assert r.exit_code == 2 and "cannot read the profile" in r.output and not out.exists()
    r = llmbench("report", tmp_path, "--profile", "h100")
    assert r.exit_code == 2  # not a run directory
