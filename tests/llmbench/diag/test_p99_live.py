"""`llmdiag p99 --live`: observe a real server on loopback with the probes and a light load, then
diagnose what was recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from refengine_proc import refengine_server

from refengine.model.tiny import resolve_model


@pytest.mark.slow  # ~23 s; .ci/run runs it (--runslow)
def test_live_observation_writes_a_run_and_a_diagnosis(tmp_path):
    with refengine_server() as (_, url):
        out = tmp_path / "live"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "llmbench.diag_cli",
                "p99",
                str(out),
                "--live",
                "--target",
                url,
                "--model",
                "tiny-test",
                "--duration",
                "4s",
                "--input-len",
                "16",
                "--output-len",
                "8",
                "--tokenizer",
                str(resolve_model("tiny-test")),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ, COLUMNS="200"),
        )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    diag = json.loads((out / "diagnosis_p99.json").read_text())
    status = {c["check_id"]: c["status"] for c in diag["checks"]}
    # the probes ran against the live server, so the server- and host-side checks had data
    assert status["p99.sched.preemption"] != "unchecked" and status["p99.host.cpu"] != "unchecked"
    assert status["p99.net.retransmits"] != "unchecked"
    assert (out / "probes" / "server.jsonl").exists() and "playbook p99" in proc.stdout
