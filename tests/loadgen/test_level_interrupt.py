"""Ctrl-C during a level: it stops in order within seconds, the requests in flight come back as
cancelled (with what they had received so far), and the KeyboardInterrupt reaches the caller."""

from __future__ import annotations

import os
import signal
import time

import pytest
from process_state import ProcessState, assert_unchanged

from loadgen import LevelSpec, run_level


def test_ctrl_c_cancels_in_flight_requests_and_reraises(delay_server):
    server = delay_server(ttft_ms=50, itl_ms=10)
    # 200-token requests take ~2 s and the window is 20 s: Ctrl-C at 0.6 s lands mid-request.
    spec = LevelSpec("ctrl-c", concurrency=3, input_len=8, output_len=200, warmup_s=0.0, duration_s=20.0)
    records, pressed = [], []

    def on_progress(p):
        if p.elapsed_s >= 0.6 and not pressed:
            pressed.append(time.time())
            os.kill(os.getpid(), signal.SIGINT)  # what the terminal does on Ctrl-C

    before = ProcessState.capture()
    with pytest.raises(KeyboardInterrupt):
        run_level(spec, server.target(), None, records.extend, on_progress)
    assert pressed
    cancelled = [r for r in records if r.status == "cancelled"]
    assert len(cancelled) == spec.concurrency
    assert all(r.t_first_token is not None and 0 < r.client_token_chunks < 200 for r in cancelled)
    assert all(r.status == "ok" for r in records if r.status != "cancelled")
    assert_unchanged(before)  # the locust processes, the reader thread: all gone, handlers as they were
