"""`stacks` probe: py-spy on the server process (the embedded engine, or --pid).

Every interval (default 5 s: a dump pauses the target for a few ms) `py-spy dump --json`
writes a row: pid, dump_s, threads = [{thread_id, name, active, owns_gil, frames}] with frames
innermost first as "function (file:line)". With ProbeContext.stacks_record, `py-spy record`
also runs for the whole probe period into probes/stacks.speedscope.json (open it on
speedscope.app); the closing row carries record_file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

from probes.base import Probe, ProbeUnavailable
from rundir import files


def parse_dump(text: str) -> list[dict]:
    """py-spy dump --json output -> compact threads. Raises ValueError on anything else."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"py-spy output is not JSON ({exc})") from None
    if not isinstance(data, list):
        raise ValueError("py-spy output is not a list of threads")
    threads = []
    for th in data:
        if not isinstance(th, dict):
            continue
        frames = [
            f"{f.get('name', '?')} ({f.get('short_filename') or f.get('filename', '?')}:{f.get('line', '?')})"
            for f in th.get("frames") or []
            if isinstance(f, dict)
        ]
        threads.append(
            {
                "thread_id": th.get("thread_id"),
                "name": th.get("thread_name"),
                "active": th.get("active"),
                "owns_gil": th.get("owns_gil"),
                "frames": frames,
            }
        )
    return threads


class StacksProbe(Probe):
    name = "stacks"
    default_interval_s = 5.0

    def __init__(self, ctx):
        super().__init__(ctx)
        self.pid = ctx.server_pid
        self.py_spy = shutil.which("py-spy") or _venv_bin("py-spy")
        self.recorder: subprocess.Popen | None = None
        self.record_file = ctx.out_dir / files.PROBES_DIR / files.STACKS_SPEEDSCOPE

    def check(self) -> None:
        if self.pid is None:
            raise ProbeUnavailable("no local server process to sample (embedded engine, or give --pid)")
        if not self.py_spy:
            raise ProbeUnavailable("py-spy is not installed")
        if not os.path.exists(f"/proc/{self.pid}"):
            raise ProbeUnavailable(f"no process {self.pid}")
        res = self._dump()
        if res.returncode != 0:
            why = (res.stderr or res.stdout).strip().splitlines()
            raise ProbeUnavailable(
                f"py-spy cannot read pid {self.pid}: {why[-1] if why else res.returncode} "
                "(needs root or ptrace permission)"
            )
        if self.ctx.stacks_record:
            self.recorder = subprocess.Popen(
                [
                    self.py_spy,
                    "record",
                    "--pid",
                    str(self.pid),
                    "--format",
                    "speedscope",
                    "-o",
                    str(self.record_file),
                    "--rate",
                    "50",
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

    def _dump(self) -> subprocess.CompletedProcess:
        assert self.py_spy is not None, "check() found py-spy before anything runs it"
        return subprocess.run(
            [self.py_spy, "dump", "--pid", str(self.pid), "--json"], capture_output=True, text=True, timeout=30
        )

    def sample(self) -> dict:
        t0 = time.time()
        res = self._dump()
        row = {"t": t0, "pid": self.pid, "dump_s": round(time.time() - t0, 4)}
        if res.returncode != 0:
            row["error"] = (res.stderr or "py-spy failed").strip().splitlines()[-1:]
            return row
        row["threads"] = parse_dump(res.stdout)
        return row

    def close(self) -> dict | None:
        if self.recorder is None:
            return None
        if self.recorder.poll() is None:
            self.recorder.send_signal(signal.SIGINT)  # py-spy writes its file on Ctrl-C
            try:
                self.recorder.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.recorder.kill()
                self.recorder.wait()
        ok = self.record_file.exists()
        return {
            "record_file": self.record_file.name if ok else None,
            **({} if ok else {"error": "py-spy record wrote no file (target exited early?)"}),
        }


def _venv_bin(name: str) -> str | None:
    path = os.path.join(os.path.dirname(sys.executable), name)
    return path if os.path.exists(path) else None
