"""The slot server (capacity known by construction) as a process, and its fixture: the root conftest.py
hands `slot_server` to every folder (the load generator's, `llmbench capacity`'s)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import httpx
import pytest

from rundir.ports import free_port

HERE = os.path.dirname(os.path.abspath(__file__))


class SlotServerProc:
    def __init__(self, slots: int, prefill_ms: float, itl_ms: float):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                os.path.join(HERE, "slot_server.py"),
                "--port",
                str(self.port),
                "--slots",
                str(slots),
                "--prefill-ms",
                str(prefill_ms),
                "--itl-ms",
                str(itl_ms),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                httpx.get(self.url + "/health", timeout=1.0)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("the slot server did not start")

    def seen(self) -> dict:
        return httpx.get(self.url + "/seen", timeout=5.0).json()

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=5.0).json()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def slot_server():
    started = []

    def start(slots: int = 3, prefill_ms: float = 30, itl_ms: float = 25) -> SlotServerProc:
        s = SlotServerProc(slots, prefill_ms, itl_ms)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
