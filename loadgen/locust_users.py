"""The locust users: one streaming request, a closed-loop user and an open-loop pacer.

Importing this module imports locust, which monkey-patches the process with gevent: only the
locust processes (loadgen.locust_proc) import it, never the CLI.

- `stream_request` sends one request and returns its RequestRecord. t_sent is the moment its first
  byte is written to the socket (a hook on gevent's socket.sendall, see _SentMark), as guidellm
  times it: building the request in locust and geventhttpclient (~0.3 ms here, more when this
  process is preempted) and connecting are the client's own work, not the server's latency,
  and show up as send lag instead of TTFT. The response is read with
  `resp._response.readline(b"\\n")` (docs/architecture.md, host facts: iter_content buffers and ruins first-token
  times). A gevent.Timeout raising RequestDeadline bounds connect + whole stream by the level's
  request_timeout_s, so a hung server cannot hold a user longer than that.
- `ClosedLoopUser`: sends back to back (wait_time constant(0)); N users = concurrency N.
- `OpenLoopPacer`: one per worker; spawns a greenlet per arrival at its planned time, whether or
  not earlier requests have finished. t_scheduled is the planned time, so send lag = t_sent -
  t_scheduled shows whether the client kept up.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
import gevent.socket
from gevent import GreenletExit
from locust import FastHttpUser, constant, task
from locust.exception import StopUser

from loadgen.arrivals import ArrivalPlan
from loadgen.errors import RequestDeadline, classify_request_error, is_refused
from loadgen.openai_body import fixed_output_len, request_dict
from loadgen.session import LevelSession
from loadgen.sse import MAX_ERROR_CHARS, StreamResult, read_sse_stream, short_of_fixed_length
from loadgen.workloads import RequestSpec
from rundir import RequestRecord

CONNECT_ERROR_BACKOFF_S = 0.05  # a closed-loop user does not spin on a refusing server
DRAIN_AFTER_DONE_S = 1.0  # reading past [DONE] to the end of the body, to reuse the connection
SEND_CLOCK_MARK = "llmbench_send_clock"  # the attribute that marks gevent's sendall as wrapped (once)


def stream_request(
    user: FastHttpUser, s: LevelSession, spec: RequestSpec, body: bytes, t_scheduled: float
) -> RequestRecord | None:
    """Send one request (None when the level no longer sends) and record it when it ends."""
    t_decided = time.time()
    if not s.may_send(t_decided):
        return None
    level = s.level
    rec = RequestRecord(
        level_id=level.level_id,
        concurrency=level.concurrency,
        request_rate=level.request_rate,
        target_input_len=spec.target_input_len,
        target_output_len=spec.target_output_len,
        t_scheduled=t_scheduled,
        t_sent=t_decided,
        t_first_token=None,
        t_done=None,
        status="ok",
        in_window=s.in_window(t_decided),
        client_prompt_tokens=spec.client_prompt_tokens
        if spec.client_prompt_tokens is not None
        else len(spec.prompt)
        if isinstance(spec.prompt, list)
        else (spec.target_input_len or None),
    )
    resp, stream = None, StreamResult()
    sent = _SentMark(s, rec, stream)
    me = gevent.getcurrent()
    deadline = RequestDeadline(f"no complete answer in {level.request_timeout_s:g} s")
    replica = s.pick_replica()  # counted in flight from here: the finally below ends it
    where, rec.replica = s.target.replica_destination(replica) if replica is not None else (s.target.path, None)
    me.llmbench_on_send = sent  # from here on, the finally below always reports it finished
    try:
        with gevent.Timeout(level.request_timeout_s, deadline):
            # locust annotates `data` as str | dict; it sends bytes as they are (the body, encoded once).
            resp = user.client.request(
                "POST",
                where,
                data=body,  # type: ignore[arg-type]
                headers=s.headers,
                stream=True,
                catch_response=True,
                name=s.target.path,
            )
            _read_response(s, resp, rec, stream, spec)
    except GreenletExit:
        _take_stream(rec, stream.digest())  # what arrived before the cut
        rec.status, rec.t_done, rec.error = "cancelled", time.time(), "cut off when the level stopped"
        raise
    except RequestDeadline as exc:  # raised outside the reads (e.g. while draining past [DONE])
        if rec.t_done is None:
            _fail(rec, "timeout", str(exc))
    finally:
        me.llmbench_on_send = None
        s.replica_done(replica)
        sent(t_decided)  # no byte was written (connect failed, cut off): sent when decided
        raw: Any = getattr(resp, "_response", None)  # geventhttpclient's response (untyped): read line by line
        if raw is not None:
            raw.release()  # back to the pool when the body was read to its end, else closed
        rec.derive()
        s.request_finished(rec, "".join(stream.text_parts))
        _report_to_locust(user, s, rec)
    return rec


class _SentMark:
    """Called once, at the request's first write to its socket (or at its end when nothing was
    written): fixes t_sent and the window flag from that moment and counts the request as sent,
    so that in_window, the drain count and TTFT all follow the same send time."""

    __slots__ = ("s", "rec", "stream", "done")

    def __init__(self, s: LevelSession, rec: RequestRecord, stream: StreamResult):
        self.s, self.rec, self.stream, self.done = s, rec, stream, False

    def __call__(self, t: float) -> None:
        if not self.done:
            self.done = True
            self.rec.t_sent = t
            self.rec.in_window = self.s.in_window(t)
            self.s.request_sent(self.rec, self.stream)


def _install_send_clock() -> None:
    """Wrap gevent's socket.sendall (the one geventhttpclient writes requests with) so that the
    greenlet of a request in flight learns when its first byte goes out. Costs one getattr per
    write for every other socket of this process (locust's own messaging uses zmq, not these)."""
    cls = gevent.socket.socket
    if getattr(cls.sendall, SEND_CLOCK_MARK, False):
        return
    inner = cls.sendall

    def sendall(self, data, flags=0):
        mark = getattr(gevent.getcurrent(), "llmbench_on_send", None)
        if mark is not None:
            mark(time.time())
        return inner(self, data, flags)

    setattr(sendall, SEND_CLOCK_MARK, True)  # marks the wrapper: installed once per process
    cls.sendall = sendall


_install_send_clock()


def _read_response(s: LevelSession, resp, rec: RequestRecord, stream: StreamResult, spec: RequestSpec) -> None:
    error = getattr(resp, "error", None)
    raw: Any = getattr(resp, "_response", None)  # geventhttpclient's response (untyped): read line by line
    if error is not None:  # no HTTP response (every status is a response, see _LevelUser)
        kind, text = classify_request_error(error)
        if is_refused(error):
            s.note_refused()
        _fail(rec, kind, text)
        return
    s.note_response()
    rec.http_status = resp.status_code
    rec.replica = rec.replica or _replica(resp, s.target.replica_header)  # the client's own pick comes first
    if rec.http_status != 200:
        detail = _read_error_body(raw)
        _fail(rec, "http_status", f"HTTP {rec.http_status}: {detail}" if detail else f"HTTP {rec.http_status}")
        return
    result = read_sse_stream(lambda: raw.readline(b"\n"), time.time, stream)
    # The body as sent, rebuilt after the stream (off the timed path): its max_tokens is what a
    # `length` finish counts, and whether it fixed the output length decides a short stream.
    sent = request_dict(spec, s.target)
    rec.max_tokens = sent.get("max_tokens")
    short = short_of_fixed_length(result, fixed_output_len(sent))
    if short is not None:
        result.error_kind, result.error = "cut_off", short
    _take_stream(rec, result)
    rec.t_done = result.t_done
    if not result.ok:
        rec.status = "timeout" if result.error_kind == "timeout" else "error"
        rec.error_kind, rec.error = result.error_kind, result.error
        return
    # Read to the end of the body so the connection can be reused; a server that keeps the
    # stream open after [DONE] only costs us that connection.
    try:
        with gevent.Timeout(DRAIN_AFTER_DONE_S, False):
            while raw.readline(b"\n"):
                pass
    except Exception:  # noqa: BLE001 - the record is complete; draining is best effort
        pass


def _replica(resp, header: str | None) -> str | None:
    """The replica a router says served this response (geventhttpclient's headers ignore case)."""
    headers = getattr(resp, "headers", None)
    if not header or headers is None:
        return None
    value = headers.get(header)
    if isinstance(value, list):  # a repeated header: the first one
        value = value[0] if value else None
    return (str(value).strip() or None) if value is not None else None


def _take_stream(rec: RequestRecord, result: StreamResult) -> None:
    rec.t_first_token, rec.itl_s = result.t_first_token, result.itl_s
    rec.client_token_chunks = result.token_chunks if result.t_first_token is not None or result.saw_done else None
    rec.prompt_tokens, rec.completion_tokens = result.prompt_tokens, result.completion_tokens
    rec.finish_reason, rec.first_token_source = result.finish_reason, result.first_token_source


def _read_error_body(raw) -> str:
    try:
        return raw.read(4096).decode("utf-8", "replace").strip()[:MAX_ERROR_CHARS]
    except Exception as exc:  # noqa: BLE001 - the error body is a courtesy; its absence is not another error
        return f"(body unreadable: {type(exc).__name__})"


def _fail(rec: RequestRecord, kind: str, text: str) -> None:
    rec.status = "timeout" if kind == "timeout" else "error"
    rec.error_kind, rec.error = kind, text[:MAX_ERROR_CHARS]
    if rec.t_done is None:
        rec.t_done = time.time()


def _report_to_locust(user: FastHttpUser, s: LevelSession, rec: RequestRecord) -> None:
    """Keep locust's own statistics meaningful (e2e time, failures), for anyone watching them."""
    exc = None if rec.status == "ok" else Exception(f"{rec.status}/{rec.error_kind}: {rec.error}")
    e2e_ms = 1000.0 * (rec.e2e_s or 0.0)
    user.environment.events.request.fire(
        request_type="POST",
        name=s.target.path,
        response_time=e2e_ms,
        response_length=0,
        exception=exc,
        context={},
        response=None,
        start_time=rec.t_sent,
        url=s.target.path,
    )


class _LevelUser(FastHttpUser):
    abstract = True
    wait_time = constant(0)

    def __init__(self, environment):
        s: LevelSession = environment.llmbench_session
        # The per-request deadline (one gevent.Timeout around connect + whole stream) is what bounds
        # a request. No socket timeouts: they would only duplicate it, and each blocking recv
        # with a timeout arms a timer of its own (measurable CPU at thousands of chunks/s).
        # locust annotates both as float; geventhttpclient takes None as "no timeout".
        self.connection_timeout = None  # type: ignore[assignment]
        self.network_timeout = None  # type: ignore[assignment]
        super().__init__(environment)
        # Every status is handed to us: a 500's body is read for the error text instead of being
        # dropped by geventhttpclient's status check.
        # geventhttpclient declares valid_response_codes a class variable; this client's own set overrides it.
        self.client.client.valid_response_codes = frozenset(range(100, 600))  # type: ignore[misc]
        self.session = s

    def _wait_for_start(self) -> None:
        s = self.session
        s.plan_ready.wait()
        delay = s.current_plan.t_start - time.time()
        if delay > 0:
            gevent.sleep(delay)

    def _idle_until_stopped(self) -> None:
        self.session.finished.wait()
        raise StopUser()


class ClosedLoopUser(_LevelUser):
    @task
    def run_level(self) -> None:
        s = self.session
        self._wait_for_start()
        warm = False
        while s.may_send(time.time()) and (request := s.next_request()) is not None:
            spec, body = request
            rec = s.inflight.spawn(stream_request, self, s, spec, body, time.time()).get()
            if not warm and isinstance(rec, RequestRecord):
                warm = True
                s.user_warm()  # this user has finished a request: one step to steady state
            # A request the session cancelled comes back as the GreenletExit that killed it.
            if isinstance(rec, RequestRecord) and rec.error_kind == "connect":
                gevent.sleep(CONNECT_ERROR_BACKOFF_S)
        self._idle_until_stopped()


class OpenLoopPacer(_LevelUser):
    def __init__(self, environment):
        s: LevelSession = environment.llmbench_session
        # All of this worker's requests share the pacer's HTTP client: size its pool for them.
        self.concurrency = s.level.max_in_flight
        super().__init__(environment)

    @task
    def run_level(self) -> None:
        s = self.session
        s.pacers += 1
        self._wait_for_start()
        assert s.level.request_rate is not None, "a pacer runs open-loop levels"
        rate = s.level.request_rate / s.n_workers
        plan = ArrivalPlan(rate, s.level.burstiness, seed=s.level.seed, stream=s.worker_index)
        gaps = plan.times(s.current_plan.t_start)
        while True:
            request = s.next_request()  # prepared before its time comes
            if request is None:  # a trace played once: its last request is out
                break
            spec, body = request
            # A trace's request carries its own send time; otherwise the next drawn arrival.
            t_planned = s.current_plan.t_start + spec.arrival_s if spec.arrival_s is not None else next(gaps)
            delay = t_planned - time.time()
            if delay > 0:
                s.stop_requested.wait(timeout=delay)
            if not s.may_send(max(t_planned, time.time())):
                break
            while len(s.inflight) >= s.level.max_in_flight and s.sending:
                gevent.sleep(0.001)  # at the cap: this shows up as send lag
            s.inflight.spawn(stream_request, self, s, spec, body, t_planned)
        self._idle_until_stopped()
