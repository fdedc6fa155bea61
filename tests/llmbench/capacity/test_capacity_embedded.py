"""The embedded default: `llmbench capacity --slo-ttft 2 --slo-tpot 0.2` against the bundled tiny
engine finishes in a few minutes on 2 cores and states an answer (slow: a dozen levels)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from rundir import RunDir


@pytest.mark.slow
def test_embedded_default_capacity_finishes_with_an_answer(tmp_path):
    t0 = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmbench.cli",
            "capacity",
            "--slo-ttft",
            "2",
            "--slo-tpot",
            "0.2",
            "--out",
            str(tmp_path / "run"),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "COLUMNS": "200"},
    )
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    answer = result["answer"]
    print(f"embedded default: {answer['headline']}; {len(result['probes'])} levels in {took:.0f} s")
    # On a quiet 2-core machine tiny meets TTFT 2 s at a few users; on a loaded one even c1 can miss
    # it, and "none, bounded by slo" is then the honest answer: what matters here is that one comes.
    # The engine and the client share the two cores unpinned, so the client can fall behind the
    # streams and read them in bursts (issue 26, docs/metrics.md): "bounded by client" is honest too.
    assert answer["headline"].startswith("max concurrency within SLO")
    if answer["capacity"] is not None:
        assert (answer["low"] is None or answer["low"] <= answer["capacity"]) and answer["capacity"] <= answer["high"]
    else:
        assert answer["bounded_by"] in ("slo", "client")
    assert took < 600
    assert RunDir(tmp_path / "run").read_summary()["levels"]
