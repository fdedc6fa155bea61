"""A test server of tests/ (the slot server, the known-delay server) started on a free loopback
port for a benchmark, returned once its /health answers."""

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
    proc = subprocess.Popen([sys.executable, str(script), "--port", str(port), *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            httpx.get(url + "/health", timeout=1.0)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{name} did not start")
