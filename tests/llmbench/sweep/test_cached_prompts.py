"""A level whose unshared prompts the server had cached is said so, from the server's own counters
(analyzers/cached_prompts.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from refengine_proc import refengine_server

from analyzers.cached_prompts import cached_prompts_words, window_hit_rate
from analyzers.probe_series import ProbeSeries
from analyzers.summary import analyze_run
from rundir import RunDir


def _series(t, rate, tokens) -> ProbeSeries:
    return ProbeSeries(
        "server",
        np.array(t, dtype=float),
        {"prefix_cache_hit_rate": np.array(rate, dtype=float), "prompt_tokens": np.array(tokens, dtype=float)},
    )


def test_the_windows_hit_rate_weighs_each_interval_by_its_prompt_tokens():
    s = _series([1, 2, 3, 4, 5], [0.9, 0.5, 0.0, np.nan, 0.9], [5000, 1000, 3000, 10, 5000])
    # (1, 3]: rows at 2 and 3, and the row at 4 holds the interval's end (its rate unknown: left out)
    assert window_hit_rate(s, 1.0, 3.5) == pytest.approx(0.5 * 1000 / 4000)
    assert window_hit_rate(s, 3.0, 3.5) is None  # 10 prompt tokens say nothing
    assert window_hit_rate(None, 1.0, 3.0) is None and window_hit_rate(s, None, 3.0) is None


def test_only_an_unshared_workloads_cached_prompts_are_a_note():
    assert "prefix cache (40% of their tokens)" in cached_prompts_words(0.4, "random")
    assert cached_prompts_words(0.4, "shared_prefix") is None  # sharing is the workload's point
    assert cached_prompts_words(0.05, "random") is None and cached_prompts_words(None, "random") is None


@pytest.mark.slow
def test_a_second_run_with_the_same_seed_against_one_server_is_told_its_prompts_were_cached(tmp_path):
    sweep = [sys.executable, "-m", "llmbench.cli", "sweep", "--concurrency", "2", "--input-len", "64"]
    sweep += ["--output-len", "8", "--warmup", "1s", "--duration", "3s", "--probes", "server"]
    env = {**os.environ, "COLUMNS": "200"}
    notes, caveats = [], []
    with refengine_server() as (_, url):
        for name in ("first", "second"):
            out = tmp_path / name
            proc = subprocess.run([*sweep, "--target", url, "--out", str(out)], capture_output=True, text=True, env=env)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            (level,) = RunDir(out).read_summary()["levels"]
            notes.append(" ".join(level["notes"]))
            summary, _ = analyze_run(RunDir(out))
            caveats.append([f.kind for f in summary.finding_groups if f.severity == "caveat"])
    assert "prefix cache" not in notes[0] and "cached_prompts" not in caveats[0]
    assert "cached_prompts" in caveats[1]  # the run's validity says so, not only the level's note
    assert "in its prefix cache (" in notes[1] and "on a random workload" in notes[1]
