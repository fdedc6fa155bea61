"""`llmdiag oom --run`: memory pressure found in a run's probes and errors, placed at its level."""

from __future__ import annotations

import os
import subprocess
import sys

from planted import base_records, clean_probes, write_run

from analyzers.oom.run import memory_pressure


def _two_levels():
    recs = base_records(n=300)
    later = base_records(n=300)
    shift = max(r.t_done for r in recs) + 1 - later[0].t_sent
    for r in later:
        r.level_id, r.concurrency = "c32", 32
        r.t_scheduled += shift
        r.t_sent += shift
        r.t_first_token += shift
        r.t_done += shift
    return recs, later


def test_pressure_is_placed_at_its_level(tmp_path):
    first, second = _two_levels()
    probes = clean_probes(first[0].t_sent - 1, second[-1].t_done + 1)
    start = second[0].t_sent + 5
    for row in probes["server"]:
        if row["t"] > start:
            row["kv_usage"], row["preemptions"] = 1.0, 2
    second[50].status, second[50].error, second[50].error_kind = "error", "HTTP 500: CUDA out of memory", "http_status"
    mp = memory_pressure(write_run(tmp_path / "r", first + second, probes))
    assert mp.occurred and mp.first_level == "c32" and mp.kv_usage_max == 1.0 and mp.oom_errors == 1
    assert {e.kind for e in mp.episodes} == {"kv_full", "preemption", "oom_error"}
    assert all(e.levels == ["c32"] for e in mp.episodes)
    assert mp.evidence_missing == ["GPU memory (gpu probe)"]


def test_no_pressure_in_a_clean_run(tmp_path):
    first, second = _two_levels()
    run = write_run(tmp_path / "r", first + second, clean_probes(first[0].t_sent - 1, second[-1].t_done + 1))
    mp = memory_pressure(run)
    assert not mp.occurred and mp.preemptions == 0 and "no memory pressure found" in mp.headline
    env = dict(os.environ, COLUMNS="200")
    out = subprocess.run(
        [sys.executable, "-m", "llmbench.diag_cli", "oom", "--run", str(run.path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "no memory pressure found" in out.stdout and "oom.ramp" in out.stdout
