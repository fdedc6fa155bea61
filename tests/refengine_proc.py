"""A refengine server process on a free loopback port, for tests in any folder (tests/ is on
sys.path through its conftest): start it, wait until /health answers, stop it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import httpx

from rundir.ports import free_port


def wait_healthy(url: str, proc: subprocess.Popen | None = None, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise RuntimeError(f"server exited early with {proc.returncode}: {out}")
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not become healthy in {timeout} s")


def start_refengine(*args: str, model: str = "tiny-test", quiet: bool = False) -> tuple[subprocess.Popen, str]:
    """`python -m refengine.server --model MODEL --port <free> ARGS`, healthy; returns (process, base URL)."""
    port = free_port()
    cmd = [sys.executable, "-m", "refengine.server", "--model", model, "--port", str(port), *args]
    return start_process(cmd, port, quiet)


def start_process(cmd: list[str], port: int, quiet: bool = False) -> tuple[subprocess.Popen, str]:
    """Any server command listening on 127.0.0.1:`port` (e.g. under torchrun), healthy; (process, base URL)."""
    out = subprocess.DEVNULL if quiet else subprocess.PIPE
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
    except BaseException:
        proc.kill()
        raise
    return proc, url


@contextlib.contextmanager
def refengine_server(*args: str, model: str = "tiny-test"):
    """The server for a `with` block; killed at its end."""
    proc, url = start_refengine(*args, model=model, quiet=True)
    try:
        yield proc, url
    finally:
        proc.kill()
        proc.wait()
