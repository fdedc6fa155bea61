"""Helpers for the load generator's tests: a delay server process handle, and running a level
while keeping its records and progress snapshots."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from loadgen import LevelProgress, LevelResult, LevelSpec, TargetSpec, run_level
from rundir import RequestRecord
from rundir.ports import free_port

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class DelayServerProc:
    proc: subprocess.Popen
    url: str
    log: Any

    def log_text(self) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def counts(self) -> dict:
        return httpx.get(self.url + "/health", timeout=2.0).json()

    def target(self, **kw) -> TargetSpec:
        return TargetSpec(self.url, "delay-model", **kw)


def start_delay_server(
    ttft_ms: float = 50, itl_ms: float = 10, mode: str = "ok", die_after: int | None = None, llama_cpp: bool = False
) -> DelayServerProc:
    port = free_port()
    cmd = [
        sys.executable,
        os.path.join(HERE, "delay_server.py"),
        "--port",
        str(port),
        "--ttft-ms",
        str(ttft_ms),
        "--itl-ms",
        str(itl_ms),
        "--mode",
        mode,
    ]
    if die_after is not None:
        cmd += ["--die-after", str(die_after)]
    if llama_cpp:
        cmd.append("--llama-cpp")
    # The log goes to a file: a pipe nobody reads fills up and freezes the server mid-test.
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    server = DelayServerProc(proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"delay server exited: {server.log_text()}")
        try:
            server.counts()
            return server
        except httpx.HTTPError:
            time.sleep(0.05)
    proc.kill()
    raise TimeoutError("delay server did not start")


@dataclass
class LevelRun:
    result: LevelResult
    records: list[RequestRecord]
    progress: list[LevelProgress] = field(default_factory=list)
    batches: int = 0

    @property
    def in_window(self) -> list[RequestRecord]:
        return [r for r in self.records if r.in_window]


def run(spec: LevelSpec, target: TargetSpec, workload_factory=None) -> LevelRun:
    records: list[RequestRecord] = []
    progress: list[LevelProgress] = []
    out = LevelRun(None, records, progress)

    def on_records(batch):
        out.batches += 1
        records.extend(batch)

    out.result = run_level(spec, target, workload_factory, on_records, progress.append)
    return out
