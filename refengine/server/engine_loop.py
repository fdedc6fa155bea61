"""Runs the engine in its own thread so HTTP handling never waits on a model step.

The scheduler is single-threaded by design, so every engine call happens on the loop thread:
HTTP handlers post commands (add, abort) into an inbox and read their request's outputs from an
asyncio queue that the loop thread feeds with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from dataclasses import dataclass
from typing import AsyncIterator, Callable

from refengine.engine import EngineStats, LLMEngine
from refengine.errors import RefEngineError
from refengine.outputs import RequestOutput
from refengine.sampling_params import SamplingParams

log = logging.getLogger(__name__)


class EngineOverloaded(Exception):
    """The bounded waiting queue is full; the caller should answer 503."""


class EngineDead(Exception):
    """The engine loop stopped after an internal error; the server reports unhealthy."""


@dataclass
class _Stream:
    queue: asyncio.Queue
    loop: asyncio.AbstractEventLoop


class EngineLoop:
    def __init__(self, engine: LLMEngine, max_waiting_requests: int = 1024,
                 on_output: Callable[[RequestOutput], None] | None = None,
                 on_abort: Callable[[str], None] | None = None):
        self.engine = engine
        self.max_waiting_requests = max_waiting_requests
        self.on_output = on_output           # metrics hooks, called on the loop thread
        self.on_abort = on_abort
        self._inbox: collections.deque = collections.deque()
        self._wake = threading.Event()
        self._streams: dict[str, _Stream] = {}
        self._lock = threading.Lock()        # guards _streams and the pending count
        self._pending_adds = 0
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="refengine-loop", daemon=True)
        self.error: BaseException | None = None
        self.stats: EngineStats = engine.stats()

    # ----- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Abort whatever is still running, join the loop thread, and end every open stream."""
        with self._lock:
            ids = list(self._streams)
        if ids:
            self._post(("abort", ids))
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout)
        for request_id in ids:
            self._deliver(request_id, EngineDead("the server is shutting down; the request was aborted"))

    @property
    def healthy(self) -> bool:
        # engine.healthy turns False as soon as a distributed rank dies, even while idle.
        return self.error is None and self._thread.is_alive() and getattr(self.engine, "healthy", True)

    # ----- called from the event loop ------------------------------------------------------
    def generate(self, prompt, params: SamplingParams, request_id: str,
                 priority: int = 0) -> AsyncIterator[RequestOutput]:
        """Admit the request now (raising EngineOverloaded / EngineDead before any response is
        sent) and return an async iterator over its outputs, step by step. Closing the iterator
        early (a client that went away) aborts the request and frees its KV blocks."""
        if not self.healthy:
            raise EngineDead(f"the engine loop is not running: {self.error!r}")
        stream = _Stream(asyncio.Queue(), asyncio.get_running_loop())
        with self._lock:
            waiting = self.stats.num_waiting + self._pending_adds
            if waiting >= self.max_waiting_requests:
                raise EngineOverloaded(
                    f"the server is overloaded: {waiting} requests are waiting (max_waiting_requests="
                    f"{self.max_waiting_requests}); retry later or raise --max-waiting-requests")
            self._streams[request_id] = stream
            self._pending_adds += 1
        self._post(("add", request_id, prompt, params, priority))
        return self._outputs(request_id, stream)

    async def _outputs(self, request_id: str, stream: _Stream) -> AsyncIterator[RequestOutput]:
        finished = False
        try:
            while True:
                item = await stream.queue.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                yield item
                if item.finished:
                    finished = True
                    return
        finally:
            with self._lock:
                self._streams.pop(request_id, None)
            if not finished:
                self._post(("abort", [request_id]))

    # ----- the loop thread -----------------------------------------------------------------
    def _post(self, command: tuple) -> None:
        self._inbox.append(command)
        self._wake.set()

    def _deliver(self, request_id: str, item) -> None:
        with self._lock:
            stream = self._streams.get(request_id)
        if stream is not None:
            stream.loop.call_soon_threadsafe(stream.queue.put_nowait, item)

    def _drain_inbox(self) -> None:
        while self._inbox:
            command = self._inbox.popleft()
            if command[0] == "add":
                _, request_id, prompt, params, priority = command
                with self._lock:
                    self._pending_adds -= 1
                try:
                    self.engine.add_request(prompt, params, request_id=request_id, priority=priority)
                except RefEngineError as exc:
                    self._deliver(request_id, exc)
            else:
                live = [rid for rid in command[1] if self.engine.scheduler.get_request(rid) is not None]
                self.engine.abort_request(live)
                if self.on_abort is not None:
                    for rid in live:
                        self.on_abort(rid)

    def _run(self) -> None:
        try:
            while not self._stopping:
                if not getattr(self.engine, "healthy", True):  # a rank died while we were idle
                    from refengine.distributed.executor import RankFailedError
                    raise RankFailedError(f"the distributed engine failed: {self.engine.executor.dead_reason}")
                self._drain_inbox()
                if not self.engine.has_unfinished_requests():
                    self.stats = self.engine.stats()
                    self._wake.wait(0.05)
                    self._wake.clear()
                    continue
                for out in self.engine.step():
                    if self.on_output is not None:
                        self.on_output(out)
                    self._deliver(out.request_id, out)
                    if out.finished:
                        # Also dropped here, not only by the consumer: a stream whose consumer
                        # never started (client gone before the first byte) must not leak.
                        with self._lock:
                            self._streams.pop(out.request_id, None)
                self.stats = self.engine.stats()
            self._drain_inbox()
        except BaseException as exc:  # an engine bug: fail every stream loudly, never hang them
            log.exception("engine loop crashed")
            self.error = exc
            with self._lock:
                ids = list(self._streams)
            for request_id in ids:
                self._deliver(request_id, EngineDead(f"the engine failed: {exc!r}"))
