"""`llmdiag p99` on a real router that adds time of its own: a refengine server behind a proxy on loopback
that holds each request 80 ms before the server sees it (bench/delay_proxy.py), swept through the proxy
with the server's own /metrics page (`--replica-metrics`). The diagnosis names the router first with a gap
near the 80 ms planted; the same sweep straight to the server, with the same page, names no router."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from refengine_proc import refengine_server

from analyzers.probe_series import read_probe
from analyzers.triage.fleet.router_gap import level_gaps
from analyzers.triage.p99 import diagnose_p99
from bench.delay_proxy import delay_proxy
from rundir import RunDir
from rundir.table import RequestTable

ENV = {**os.environ, "COLUMNS": "200"}
DELAY_S = 0.080
ROUTER_ID = "p99.fleet.router"


def _sweep(target: str, page: str, out) -> None:
    sweep = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmbench.cli",
            "sweep",
            "--target",
            target,
            "--model",
            "tiny-test",
            "--replica-metrics",
            page,
            "--input-len",
            "32",
            "--output-len",
            "16",
            "--concurrency",
            "2",
            "--warmup",
            "1s",
            "--duration",
            "6s",
            "--probes",
            "server",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr


@pytest.mark.slow  # one server, two 6 s levels, the diagnosis: ~60 s on two cores
def test_a_router_that_holds_requests_80_ms_is_named_first_and_the_server_driven_directly_is_not(tmp_path):
    with refengine_server(model="tiny-test") as (_, backend), delay_proxy(backend, DELAY_S) as router:
        _sweep(router, f"{backend}/metrics", tmp_path / "via")
        _sweep(backend, f"{backend}/metrics", tmp_path / "direct")
    proc = subprocess.run(
        [sys.executable, "-m", "llmbench.diag_cli", "p99", str(tmp_path / "via")],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(proc.stdout)  # the diagnosis as a person reads it (pytest -s)
    diag = json.loads((tmp_path / "via" / "diagnosis_p99.json").read_text())
    first = diag["findings"][0]
    assert first["check_id"] == ROUTER_ID, diag["headline"]
    (level,) = first["evidence"]["levels"].values()
    # The planted 80 ms, and what the proxy and the server's own HTTP front end add on a busy host.
    assert 0.8 * DELAY_S <= level["gap_s"] <= DELAY_S + 0.1, level
    # Every request paid it: the median's gap holds the planted delay, and the check never calls it
    # uneven. Whether it says "every request" depends on how tightly the replicas' buckets pin their
    # median; on a busy host the replica's own TTFT spreads over several buckets and it says unresolved.
    lo, hi = level["median_gap_range_s"]
    assert lo <= DELAY_S + 0.02 and hi >= 0.8 * DELAY_S, level
    assert level["shape"] in ("every request", "unresolved"), level
    if level["shape"] == "every request":
        assert "to every request's TTFT" in first["title"], first["title"]
    # Straight to the server, the page read is the target's own: there is no router to judge.
    run = RunDir(tmp_path / "direct")
    direct = diagnose_p99(run)
    check = next(c for c in direct.checks if c.check_id == ROUTER_ID)
    assert check.status == "unchecked" and "the target's own" in check.detail, check.detail
    assert not any(f.check_id == ROUTER_ID for f in direct.findings + direct.context)
    # ... and the same measurement there finds far less than the planted delay: the 80 ms was the proxy's.
    server = read_probe(run.probe_file("server"), "server")
    assert server is not None
    (plain,), _ = level_gaps(RequestTable.load(run), server, None)
    assert plain.gap_s < DELAY_S / 2, plain.evidence()
