"""The served engine is built and stepped on one thread (refengine/server/compute_thread.py)."""

from __future__ import annotations

import threading

import pytest

from refengine.server.compute_thread import ComputeThread
from refengine.server.engine_loop import EngineLoop


def test_call_runs_on_the_thread_and_hands_back_results_and_exceptions():
    compute = ComputeThread(name="t-compute")
    assert compute.call(lambda: threading.current_thread().name) == "t-compute"
    assert compute.call(lambda: 6 * 7) == 42
    with pytest.raises(ValueError, match="bad input"):
        compute.call(lambda: (_ for _ in ()).throw(ValueError("bad input")))
    assert compute.call(lambda: "still serving") == "still serving"  # an exception did not end it
    compute.stop()
    compute.join(5)


class _RecordingEngine:
    """The EngineLoop's view of an engine, recording which thread each call came from."""

    def __init__(self) -> None:
        self.threads: set[int] = set()
        self.built_on = threading.get_ident()

    def _seen(self) -> None:
        self.threads.add(threading.get_ident())

    def stats(self):
        self._seen()
        return None

    def has_unfinished_requests(self) -> bool:
        self._seen()
        return False

    def abort_request(self, ids) -> None:
        self._seen()


def test_the_loop_steps_the_engine_on_the_thread_that_built_it():
    compute = ComputeThread()
    engine = compute.call(_RecordingEngine)
    assert engine.built_on == compute.ident != threading.get_ident()
    loop = EngineLoop(engine, thread=compute)  # type: ignore[arg-type]
    engine.threads.clear()
    loop.start()
    assert loop.healthy
    for _ in range(100):  # the loop polls an idle engine every 50 ms
        if engine.threads:
            break
        threading.Event().wait(0.02)
    loop.stop()
    assert engine.threads == {compute.ident}
    assert not loop.healthy  # its loop ended with stop()
