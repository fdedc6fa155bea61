"""ComputeThread: the one thread that does all of a served engine's torch work, building it included.

Why one thread: PyTorch's CPU ops run their parallel regions on an OpenMP team that belongs to the
thread that starts them. A server that builds the engine on its main thread (loading, packing,
the first ops start a team there) and then steps it on a loop thread has two teams on the same
cores, and libgomp, seeing more threads than CPUs, stops its workers spinning between regions, so
every parallel op waits for a sleeping worker to wake: on the 2-core AMX Xeon an elementwise op on a
512 x 512 tensor took 300 us instead of 55, and a 128-token prefill of the 512-hidden Llama 24 ms
instead of 16 (bench/compute_thread.py, bench/RESULTS.md). Building and stepping on one thread keeps
one team; the main thread runs only the HTTP server, which does no parallel torch work.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class ComputeThread:
    def __init__(self, name: str = "refengine-loop"):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            fn, box, done = self._jobs.get()
            if fn is None:
                return
            try:
                box.append((True, fn()))
            except BaseException as exc:  # noqa: BLE001 -- handed back to the caller, who raises it
                box.append((False, exc))
            finally:
                done.set()

    def call(self, fn: Callable[[], T]) -> T:
        """Run fn on the thread, wait for it, and return its result or raise its exception."""
        box: list = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def run_forever(self, fn: Callable[[], None]) -> None:
        """Hand the thread to fn (the engine loop) and return at once; the thread ends when fn does."""
        self._jobs.put((fn, [], threading.Event()))
        self.stop()

    def stop(self) -> None:
        """End the thread after the jobs already given."""
        self._jobs.put((None, None, None))

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def ident(self) -> int | None:
        return self._thread.ident
