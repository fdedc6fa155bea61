"""Servers a benchmark starts on a free loopback port: a test server of tests/ (the slot server, the
known-delay server), returned once its /health answers, and the reference engine's server (one, or a
fleet's front), optionally under taskset, with a wait for its health and a stop."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from rundir.ports import free_port


def start_script_server(script: Path, *args: str, name: str = "the server") -> tuple[subprocess.Popen, str]:
    """`python SCRIPT --port P ARGS` on 127.0.0.1; (process, URL) once /health answers."""
    import httpx

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(script), "--port", str(port), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            httpx.get(url + "/health", timeout=1.0)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{name} did not start")


def launch_refengine(args: list[str], cores: str | None = None) -> tuple[subprocess.Popen, str]:
    """`python -m refengine.server ARGS --port P` (under `taskset -c CORES` when given), not yet waited
    for: start several, then wait_healthy each. (process, URL)."""
    port = free_port()
    pin = ["taskset", "-c", cores] if cores else []
    proc = subprocess.Popen(
        [*pin, sys.executable, "-m", "refengine.server", *args, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, f"http://127.0.0.1:{port}"


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 300.0) -> None:
    """Until /health answers 200; RuntimeError when the process exits first or the time runs out."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server for {url} exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} not healthy after {timeout_s:.0f} s")


def stop(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM (a fleet's front stops its replicas), SIGKILL after `grace_s`."""
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
