"""`llmbench sweep` without --warmup/--duration sizes each level (docs/metrics.md, "Sizing a level")
and says what it got; without an SLO of the user's, the answer leads with what each level meets."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rundir import LevelMeta, RunDir

BASE = [
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
    "--request-timeout",
    "30s",
]
ENV = {**os.environ, "COLUMNS": "200"}


def _run(args):
    return subprocess.run(BASE + args, capture_output=True, text=True, timeout=300, env=ENV)


@pytest.mark.slow  # ~40 s: a sized level lasts at least the default 5 s warm-up and 20 s window
def test_a_default_sweep_sizes_its_level_and_leads_with_what_the_data_says(tmp_path):
    out = tmp_path / "run"
    proc = _run(["--concurrency", "2", "--probes", "none", "--out", str(out)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    info = RunDir(out).read_info()
    assert info.sweep.sample_target == 100 and info.sweep.steady_warmup and info.slos.default
    meta = info.level_meta["c2-in16-out8"]
    # tiny-test answers in well under a second: both minimums apply and the target is met
    assert (meta.warmup_end, meta.window_end_by, meta.sample_target) == ("steady", "samples", 100)
    assert meta.warmup_s == pytest.approx(5.0, abs=0.1) and meta.window_s == pytest.approx(20.0, abs=0.1)
    lv = next(x for x in RunDir(out).read_summary()["levels"] if x["level_id"] == "c2-in16-out8")
    assert lv["ttft"]["n"] >= 100
    said = " ".join(proc.stdout.split())
    assert f"c2-in16-out8: {lv['ttft']['n']} requests in 20 s (sized for P99; warm-up 5.0 s to steady state)" in said
    assert "SLO each level meets: c2-in16-out8 meets TTFT P99 ≤" in said
    assert said.index("Ceiling:") < said.index("SLO each level meets:") < said.index("within the default SLO:")


@pytest.mark.slow
def test_sizing_options_are_one_line_errors(tmp_path):
    proc = _run(["--concurrency", "1", "--max-duration", "10s", "--out", str(tmp_path / "r")])
    assert proc.returncode == 2 and "--max-duration must be at least" in proc.stdout + proc.stderr
    proc = _run(
        [
            "--concurrency",
            "1",
            "--warmup",
            "1s",
            "--duration",
            "2s",
            "--max-duration",
            "10s",
            "--out",
            str(tmp_path / "r"),
        ]
    )
    assert proc.returncode == 2 and "nothing is sized" in proc.stdout + proc.stderr
    assert not (tmp_path / "r").exists()


def test_the_sizing_words():
    from reports.level_sizing import sizing_line

    sized = LevelMeta(window_s=41.2, warmup_s=27.3, warmup_end="steady", window_end_by="samples", sample_target=100)
    assert (
        sizing_line("c64", sized, 112, 120.0)
        == "c64: 112 requests in 41 s (sized for P99; warm-up 27 s to steady state)"
    )
    bound = LevelMeta(window_s=120.0, warmup_s=5.0, warmup_end="steady", window_end_by="max", sample_target=100)
    assert sizing_line("c1", bound, 31, 120.0) == (
        "c1: stopped at --max-duration 120 s with 31 requests: P99 from fewer than 100 (warm-up 5.0 s to steady state)"
    )
    assert sizing_line("c1", LevelMeta(window_s=20.0, warmup_end="fixed", window_end_by="fixed"), 80, None) is None
