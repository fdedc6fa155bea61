"""Runs the engine in its own thread so HTTP handling never waits on a model step.

The scheduler is single-threaded by design, so every engine call happens on the loop thread:
HTTP handlers post commands (add, abort) into an inbox and read their request's outputs from an
asyncio queue that the loop thread feeds with `call_soon_threadsafe`: once per step for all of
the step's outputs, not once per output, so 32 streams cost the event loop one wake-up (and the
engine thread one GIL hand-off) per step instead of 32.

Admission counts, at the moment a request is admitted, every request admitted and not yet
scheduled (in the inbox or the waiting queue) plus the preempted ones waiting again, so the
waiting queue never exceeds `max_waiting_requests`, however long a step takes.

A step that fails (StepFailedError) finishes only its failed requests, each with an error on its
own stream, and the loop goes on; any other exception from a step finishes every request in the
engine the same way. The loop stops for good (healthy False, /health 503) only when a rank died,
the KV cache fails its integrity check afterwards, or MAX_CONSECUTIVE_FAILURES steps failed in a
row with nobody to blame (e.g. a CUDA context that is gone).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from dataclasses import dataclass
from typing import AsyncIterator, Callable

from refengine.engine import EngineStats, LLMEngine
from refengine.errors import RefEngineError, StepFailedError
from refengine.outputs import RequestOutput
from refengine.sampling_params import SamplingParams
from refengine.server.compute_thread import ComputeThread

log = logging.getLogger(__name__)

MAX_CONSECUTIVE_FAILURES = 3


class EngineOverloaded(Exception):
    """The bounded waiting queue is full; the caller should answer 503."""


class EngineDead(Exception):
    """The engine loop stopped after an internal error; the server reports unhealthy."""


class RequestFailed(Exception):
    """This request failed inside the engine; the engine goes on serving the others."""


@dataclass
class _Stream:
    queue: asyncio.Queue
    loop: asyncio.AbstractEventLoop


class EngineLoop:
    def __init__(
        self,
        engine: LLMEngine,
        max_waiting_requests: int = 1024,
        on_output: Callable[[RequestOutput], None] | None = None,
        on_abort: Callable[[str], None] | None = None,
        thread: ComputeThread | None = None,
    ):
        """`thread`: the thread that built the engine, to step it on too (compute_thread.py says why);
        without one the loop gets a thread of its own."""
        self.engine = engine
        self.max_waiting_requests = max_waiting_requests
        self.on_output = on_output  # metrics hooks, called on the loop thread
        self.on_abort = on_abort
        self.on_failed: Callable[[str], None] | None = None  # a request finished with an error
        self.on_step_failure: Callable[[bool], None] | None = None  # a step failed (attributed or not)
        self._inbox: collections.deque = collections.deque()
        self._wake = threading.Event()
        self._streams: dict[str, _Stream] = {}
        self._lock = threading.Lock()  # guards _streams, _unscheduled, _preempted_waiting
        # Admitted and never scheduled yet: request id -> its Request once added (None while in the inbox).
        self._unscheduled: dict[str, object] = {}
        self._preempted_waiting = 0
        self._consecutive_failures = 0
        self._stopping = False
        self._compute = thread or ComputeThread()
        self._running = threading.Event()  # set from start() until _run ends
        self.error: BaseException | None = None
        self.stats: EngineStats = engine.stats()

    # ----- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        self._running.set()  # cleared when _run ends
        self._compute.run_forever(self._run)

    def stop(self, timeout: float = 10.0) -> None:
        """Abort whatever is still running, join the loop thread, and end every open stream."""
        with self._lock:
            ids = list(self._streams)
        if ids:
            self._post(("abort", ids))
        self._stopping = True
        self._wake.set()
        self._compute.stop()  # a loop never started: the thread ends now
        self._compute.join(timeout)
        for request_id in ids:
            self._deliver(request_id, EngineDead("the server is shutting down; the request was aborted"))

    @property
    def healthy(self) -> bool:
        # engine.healthy turns False as soon as a distributed rank dies, even while idle.
        return self.error is None and self._running.is_set() and getattr(self.engine, "healthy", True)

    # ----- called from the event loop ------------------------------------------------------
    def generate(
        self, prompt, params: SamplingParams, request_id: str, priority: int = 0
    ) -> AsyncIterator[RequestOutput]:
        """Admit the request now (raising EngineOverloaded / EngineDead before any response is
        sent) and return an async iterator over its outputs, step by step. Closing the iterator
        early (a client that went away) aborts the request and frees its KV blocks."""
        if not self.healthy:
            raise EngineDead(f"the engine loop is not running: {self.error!r}")
        stream = _Stream(asyncio.Queue(), asyncio.get_running_loop())
        with self._lock:
            waiting = self.num_waiting_admitted
            if waiting >= self.max_waiting_requests:
                raise EngineOverloaded(
                    f"the server is overloaded: {waiting} requests are waiting (max_waiting_requests="
                    f"{self.max_waiting_requests}); retry later or raise --max-waiting-requests"
                )
            self._streams[request_id] = stream
            self._unscheduled[request_id] = None
        self._post(("add", request_id, prompt, params, priority, time.monotonic()))  # arrival: admitted now
        return self._outputs(request_id, stream)

    @property
    def num_waiting_admitted(self) -> int:
        """Requests admitted and not running: never scheduled (inbox or queue) + preempted, waiting again.
        Read live, not from the last step's bookkeeping: a request the running step scheduled (its
        prefill is under way) is running, as vLLM counts it, even before the step ends; one whose
        client has gone (its abort waits for the step to end) waits for nothing."""
        streams = self._streams
        never = sum(
            1
            for rid, request in list(self._unscheduled.items())
            if rid in streams and (request is None or not _was_scheduled(request))
        )
        return never + self._preempted_waiting

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

    def _deliver_step(self, outputs: list[RequestOutput]) -> None:
        """Hand a step's outputs to their streams with one callback per event loop."""
        batches: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, RequestOutput]]] = {}
        with self._lock:
            for out in outputs:
                stream = self._streams.get(out.request_id)
                if stream is not None:
                    batches.setdefault(stream.loop, []).append((stream.queue, out))
                if out.finished:
                    # Also dropped here, not only by the consumer: a stream whose consumer
                    # never started (client gone before the first byte) must not leak.
                    self._streams.pop(out.request_id, None)
        for loop, batch in batches.items():
            loop.call_soon_threadsafe(_put_all, batch)

    def _drain_inbox(self) -> None:
        while self._inbox:
            command = self._inbox.popleft()
            if command[0] == "add":
                _, request_id, prompt, params, priority, arrival = command
                try:
                    self.engine.add_request(
                        prompt, params, request_id=request_id, priority=priority, arrival_time=arrival
                    )
                except RefEngineError as exc:
                    with self._lock:
                        self._unscheduled.pop(request_id, None)
                    self._deliver(request_id, exc)
                    continue
                with self._lock:
                    if request_id in self._unscheduled:
                        self._unscheduled[request_id] = self.engine.scheduler.get_request(request_id)
            else:
                live = [rid for rid in command[1] if self.engine.scheduler.get_request(rid) is not None]
                self.engine.abort_request(live)
                with self._lock:
                    for rid in command[1]:
                        self._unscheduled.pop(rid, None)
                if self.on_abort is not None:
                    for rid in live:
                        self.on_abort(rid)

    def _count_waiting(self) -> None:
        """After a step: forget requests that got scheduled or finished; count the preempted ones."""
        with self._lock:
            never = 0
            for rid, request in list(self._unscheduled.items()):
                if request is None:
                    continue
                if _was_scheduled(request):
                    del self._unscheduled[rid]
                else:
                    never += 1
            self._preempted_waiting = max(0, self.engine.scheduler.num_waiting - never)

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except StepFailedError as exc:
            self._fail(exc.failed_ids, exc.cause, exc.attributed)
            return
        except Exception as exc:  # not even the step's requests are known: fail all but the inbox's
            if not getattr(self.engine, "healthy", True) or self.engine.parallel_config.world_size > 1:
                raise
            with self._lock:
                everyone = set(self.engine.scheduler.requests) | {
                    rid for rid in self._streams if self._unscheduled.get(rid, "") is not None
                }
            self._fail(sorted(everyone), exc, attributed=False)
            return
        self._consecutive_failures = 0
        if self.on_output is not None:
            for out in outputs:
                self.on_output(out)
        self._deliver_step(outputs)

    def _fail(self, request_ids: list[str], cause: BaseException, attributed: bool) -> None:
        """Finish these requests with an error on their own streams; the loop goes on (or stops,
        raising, if the engine cannot be trusted any more)."""
        log.error(
            "engine step failed (%s): %r; failing %d request(s): %s",
            "attributed" if attributed else "unattributed",
            cause,
            len(request_ids),
            request_ids[:8],
            exc_info=cause,
        )
        if self.on_step_failure is not None:
            self.on_step_failure(attributed)
        self.engine.abort_request(request_ids)
        self.engine.scheduler.kv_cache_manager.check_integrity()  # raises if the failure left it inconsistent
        for rid in request_ids:
            if self.on_failed is not None:
                self.on_failed(rid)
            self._deliver(rid, RequestFailed(f"the request failed inside the engine: {cause!r}"))
            with self._lock:
                self._streams.pop(rid, None)
                self._unscheduled.pop(rid, None)
        if not attributed:
            self._consecutive_failures += 1
            if self._consecutive_failures >= MAX_CONSECUTIVE_FAILURES:
                raise RuntimeError(
                    f"{self._consecutive_failures} engine steps in a row failed with nobody "
                    f"to blame; the last: {cause!r}"
                ) from cause

    def _run(self) -> None:
        try:
            while not self._stopping:
                if not getattr(self.engine, "healthy", True):  # a rank died while we were idle
                    from refengine.distributed.executor import RankFailedError

                    raise RankFailedError(f"the distributed engine failed: {self.engine.executor.dead_reason}")
                self._drain_inbox()
                if not self.engine.has_unfinished_requests():
                    self._count_waiting()
                    self.stats = self.engine.stats()
                    self._wake.wait(0.05)
                    self._wake.clear()
                    continue
                self._step()
                self._count_waiting()
                self.stats = self.engine.stats()
            self._drain_inbox()
        except BaseException as exc:  # an engine bug: fail every stream loudly, never hang them
            log.exception("engine loop crashed")
            self.error = exc
            with self._lock:
                ids = list(self._streams)
            for request_id in ids:
                self._deliver(request_id, EngineDead(f"the engine failed: {exc!r}"))
        finally:
            self._running.clear()


def _was_scheduled(request) -> bool:
    return request.timestamps.first_scheduled is not None or request.is_finished()


def _put_all(batch: list[tuple[asyncio.Queue, RequestOutput]]) -> None:
    """Runs on the event loop: one step's outputs into their streams' queues."""
    for queue, item in batch:
        queue.put_nowait(item)
