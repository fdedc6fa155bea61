"""The level's locust processes (loadgen.locust_proc): one LocalRunner process, or a master and its
workers on loopback (or a master for workers started elsewhere); started in a session of their
own, stopped politely, then terminated, then killed, the end of each one's log kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, BinaryIO

from loadgen.specs import LevelSpec
from rundir.ports import free_port

# The folder holding the loadgen package (this file is loadgen/level/processes.py): on the locust
# processes' path, so they import this very loadgen.
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class LocustProcess(subprocess.Popen):
    """A locust process, with its command, its log file (the first's stderr; a worker's whole output)
    and, once stopped, the log's end."""

    cmd: list[str]
    log: BinaryIO
    log_tail: str = ""


def start_processes(
    spec: LevelSpec, config: dict, logdir: str, master_bind: str | None, procs: list[LocustProcess]
) -> None:
    """Start the level's locust processes, appending each to `procs` as soon as it exists."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    base = [sys.executable, "-m", "loadgen.locust_proc"]
    # A session of their own: the terminal's Ctrl-C reaches only us, and we stop them in order.
    # Same working directory as the caller, so relative dataset and tokenizer paths mean the same.
    common: dict[str, Any] = dict(env=env, start_new_session=True)
    if spec.workers == 1 and master_bind is None:
        cmds = [base + ["--local"]]
    else:
        host, port = master_bind.rsplit(":", 1) if master_bind else ("127.0.0.1", str(free_port()))
        cmds = [base + ["--master", "--bind-host", host, "--port", port, "--expect-workers", str(spec.workers)]]
        if master_bind is None:
            cmds += [base + ["--worker", "--master-host", "127.0.0.1", "--port", port, "--once"]] * spec.workers
    for n, cmd in enumerate(cmds):
        log = open(os.path.join(logdir, f"proc{n}.log"), "w+b")
        if n == 0:
            p = LocustProcess(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, **common)
        else:
            p = LocustProcess(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, **common)
        p.log, p.cmd = log, cmd
        procs.append(p)
        if n == 0 and p.stdin is not None:  # a pipe: always, for the first
            p.stdin.write(json.dumps(config).encode())
            p.stdin.close()


def stop_all(procs: list[LocustProcess], timeout: float = 5.0, polite_s: float = 0.0) -> None:
    """Wait polite_s for the processes to exit, then terminate, then kill; keep the end of each log.
    Idempotent."""
    procs = [p for p in procs if not p.log.closed]
    polite_until = time.monotonic() + polite_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, polite_until - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        p.log_tail = _read_tail(p.log)
        p.log.close()


def _read_tail(f, n: int = 3000) -> str:
    f.flush()
    f.seek(0, os.SEEK_END)
    f.seek(max(0, f.tell() - n))
    return f.read().decode("utf-8", "replace")
