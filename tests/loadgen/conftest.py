"""Fixtures for the load generator's tests (helpers live in loadgen_harness.py)."""

from __future__ import annotations

import pytest
from loadgen_harness import start_delay_server


@pytest.fixture
def delay_server():
    """delay_server(ttft_ms=50, itl_ms=10, mode="ok", die_after=None) -> DelayServerProc, killed after the test."""
    started = []

    def start(**kw):
        server = start_delay_server(**kw)
        started.append(server)
        return server

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
        s.proc.wait()
