"""One locust process's share of a level: the local runner's, or one worker's under a master.

The session owns what the users of this process share: the workload slice (indices k, k+N, ...),
the level's timeline (the Plan, in epoch seconds, from the coordinator), the greenlets of the
requests in flight, the outbox of finished RequestRecords, and the dead-server detector. Its
supervisor greenlet walks the timeline:

  plan -> [warm-up] -> window_start -> [measured window] -> window_end
       (a sized level's window_start and window_end may move earlier meanwhile: MSG_WINDOW, loadgen.sizing)
       -> drain: wait until this process's in-window requests have finished  -> MSG_DRAINED
       -> MSG_STOP from the coordinator (all drained, server died, deadline)
       -> stop sending, cancel what is still in flight (status "cancelled"), flush -> MSG_DONE

Message listeners only set state; the supervisor does the waiting, so a LocalRunner (which
delivers messages synchronously) and a WorkerRunner (over zmq) behave the same.
"""

from __future__ import annotations

import socket
import time

import gevent
import psutil
from gevent.event import Event
from gevent.pool import Group

from loadgen.openai_body import request_body, request_headers
from loadgen.plan import Plan
from loadgen.replica_balancer import ReplicaBalancer
from loadgen.saturation import LATE_FACTOR
from loadgen.specs import LevelSpec, TargetSpec
from loadgen.token_count import COMPLETION_TEXT_KEY
from loadgen.workloads import RequestSpec, make_workload
from rundir import RequestRecord

MSG_CONFIG = "llmbench_config"  # coordinator -> worker: level, target, workload, worker index
MSG_READY = "llmbench_ready"  # worker -> coordinator: session built
MSG_PLAN = "llmbench_plan"  # coordinator -> workers: the timeline
MSG_WINDOW = "llmbench_window"  # coordinator -> workers: the timeline, moved (a sized level)
MSG_STOP = "llmbench_stop"  # coordinator -> workers: stop, cancel in-flight, report done
MSG_RECORDS = "llmbench_records"  # worker -> coordinator: finished records and counters
MSG_DRAINED = "llmbench_drained"  # worker -> coordinator: my in-window requests have all finished
MSG_SERVER_DEAD = "llmbench_server_dead"  # worker -> coordinator: the target keeps refusing connections
MSG_DONE = "llmbench_done"  # worker -> coordinator: last word of the level

FLUSH_INTERVAL_S = 0.1  # records leave the process at most this long after they finish
COUNTER_INTERVAL_S = 0.5  # counters (for progress bars) are sent at least this often
MAX_RECORDS_PER_MESSAGE = 200  # a record with a long ITL list is ~10-20 kB of msgpack
DEAD_AFTER_REFUSALS = 5  # consecutive refused connections ...
DEAD_AFTER_S = 0.5  # ... spanning at least this long: the server is gone
DEAD_SERVER_GRACE_S = 1.0  # in-flight requests of a dead server get this long to fail on their own


class LevelSession:
    def __init__(self, config: dict, runner):
        self.runner = runner
        self.level = LevelSpec(**config["level"])
        self.target = TargetSpec(**config["target"])
        self.workload = make_workload(config["workload"])
        self.worker_index, self.n_workers = int(config["worker_index"]), int(config["n_workers"])
        self.worker_id = f"w{self.worker_index}@{socket.gethostname()}"
        self.headers = request_headers(self.target)
        # The parent counts output tokens with the client tokenizer (not here: tokenizing in the
        # locust process would take CPU from the streams); ship the text only when it will be used.
        self.ship_text = bool(config["workload"].get("tokenizer"))
        self.plan: Plan | None = None
        self.plan_ready, self.stop_requested, self.finished = Event(), Event(), Event()
        self._plan_moved = Event()
        self.warm_users = 0  # users that have finished at least one request (sizing)
        self.stop_reason: str | None = None
        self.sending = True
        self.inflight = Group()
        self.in_window_inflight = 0
        self._window_over = False
        self._drained = Event()
        self.sent = self.cancelled = self.pacers = 0
        self.cpu_percent: float | None = None
        self._k = 0
        # Replicas driven directly: this process's balancer over them (its greenlets share the counts).
        self.balancer = (
            ReplicaBalancer(len(self.target.replica_urls), self.target.lb_policy, self.worker_index, self.n_workers)
            if self.target.replica_urls
            else None
        )
        self._outbox: list[dict] = []
        self._open: dict[int, tuple] = {}  # sent and not finished, by id(record): (t_sent, StreamResult, record)
        self._fast_first_token = False  # some request had its first token within the TTFT bound
        self._refused, self._refused_since = 0, 0.0
        self._dead_reported = False

    # ----- used by the users ---------------------------------------------------------------
    def next_request(self) -> tuple[RequestSpec, bytes] | None:
        """This process's next request and its body; None once a finite workload (a trace played
        once) has no more: the users then stop sending."""
        i = self.worker_index + self.n_workers * self._k
        if not self.workload.has(i):
            return None
        self._k += 1
        spec = self.workload.spec(i)
        return spec, request_body(spec, self.target)

    def pick_replica(self) -> int | None:
        """The replica (index) of the request about to be sent, counted in flight until
        replica_done(); None when the target is one URL."""
        return self.balancer.pick() if self.balancer is not None else None

    def replica_done(self, index: int | None) -> None:
        if self.balancer is not None and index is not None:
            self.balancer.finished(index)

    def may_send(self, t: float) -> bool:
        if not self.sending or self.plan is None:
            return False
        return not (self.level.drain == "stop_sending" and t >= self.plan.window_end)

    @property
    def current_plan(self) -> Plan:
        """The level's plan as it stands: set (plan_ready) before any user starts or the supervisor wakes."""
        assert self.plan is not None, "a level's plan arrives before its users start"
        return self.plan

    def in_window(self, t_sent: float) -> bool:
        return self.current_plan.in_window(t_sent)

    def user_warm(self) -> None:
        """A closed-loop user finished its first request (steady state, loadgen.sizing)."""
        self.warm_users += 1

    def request_sent(self, record: RequestRecord, stream) -> None:
        """`stream` (a loadgen.sse.StreamResult) is filled as the response arrives: its
        t_first_token is set at the first token, before the record is."""
        self.sent += 1
        if record.in_window:
            self.in_window_inflight += 1
        self._open[id(record)] = (record.t_sent, stream, record)

    def late_first_tokens(self, now: float) -> int:
        """Requests in flight that have waited LATE_FACTOR x the level's TTFT bound with no first
        token yet: their TTFT is already past it, before any of them finishes. Counted only once
        some request of the level had its first token within the bound, so that the count witnesses
        a TTFT that rose (a queue growing), not one that is long from the start (a slow prefill,
        measured to the end). No bound: 0."""
        bound = self.level.saturation_ttft_s
        if bound is None:
            return 0
        opened = [(t_sent, stream) for t_sent, stream, *_record in self._open.values()]
        self._fast_first_token = self._fast_first_token or any(
            stream.t_first_token is not None and stream.t_first_token - t_sent <= bound for t_sent, stream in opened
        )
        if not self._fast_first_token:
            return 0
        return sum(
            1 for t_sent, stream in opened if stream.t_first_token is None and now - t_sent > LATE_FACTOR * bound
        )

    def request_finished(self, record: RequestRecord, completion_text: str = "") -> None:
        self._open.pop(id(record), None)
        bound = self.level.saturation_ttft_s
        if bound is not None and record.t_first_token is not None and record.t_first_token - record.t_sent <= bound:
            self._fast_first_token = True
        if record.in_window:
            self.in_window_inflight -= 1
            if self._window_over and self.in_window_inflight == 0:
                self._drained.set()
        if record.status == "cancelled":
            self.cancelled += 1
        record.worker_id = self.worker_id
        # A shallow copy: asdict() deep-copies the itl list, ~0.5 ms a record at no benefit.
        d = dict(record.__dict__)
        if self.ship_text and record.client_token_chunks is not None:
            d[COMPLETION_TEXT_KEY] = completion_text
        self._outbox.append(d)

    def note_response(self) -> None:
        self._refused = 0

    def note_refused(self) -> None:
        now = time.time()
        if self._refused == 0:
            self._refused_since = now
        self._refused += 1
        if (
            self._refused >= DEAD_AFTER_REFUSALS
            and now - self._refused_since >= DEAD_AFTER_S
            and not self._dead_reported
        ):
            self._dead_reported = True
            self.sending = False  # at once; the coordinator's stop follows
            self.runner.send_message(MSG_SERVER_DEAD, {"worker_id": self.worker_id, "refusals": self._refused})

    # ----- driven by messages --------------------------------------------------------------
    def set_plan(self, plan: dict) -> None:
        self.plan = Plan(**plan)
        self.plan_ready.set()
        self.runner.greenlet.spawn(self._supervise)
        self.runner.greenlet.spawn(self._flush_loop)

    def move_plan(self, plan: dict) -> None:
        """A sized level's plan moved (loadgen.sizing): the supervisor's waits follow it. The moved
        times lie ahead when announced; should this arrive after one of them anyway (a process
        frozen for longer than the announcement's lead), the requests still in flight take the
        side of the window their send time gives them."""
        self.plan = Plan(**plan)
        for _t, _stream, record in self._open.values():
            inside = self.plan.in_window(record.t_sent)
            if inside != record.in_window:
                record.in_window = inside
                self.in_window_inflight += 1 if inside else -1
        self._plan_moved.set()

    def request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        if reason == "server_died":
            self.sending = False
        self.stop_requested.set()

    # ----- the supervisor ------------------------------------------------------------------
    def _supervise(self) -> None:
        proc = psutil.Process()
        self._sleep_until(lambda p: p.window_start)
        cpu0, t0 = _cpu_s(proc), time.time()
        self._sleep_until(lambda p: p.window_end)
        plan = self.current_plan  # the window is over: its plan moves no more
        t1 = time.time()
        if t1 - t0 > 0.05:
            self.cpu_percent = 100.0 * (_cpu_s(proc) - cpu0) / (t1 - t0)
        self._window_over = True
        if self.in_window_inflight == 0:
            self._drained.set()
        gevent.wait([self._drained, self.stop_requested], count=1, timeout=max(0.0, plan.hard_deadline - time.time()))
        if not self.stop_requested.is_set():
            self.runner.send_message(MSG_DRAINED, {"worker_id": self.worker_id})
        # The coordinator answers at once when all workers drained; the deadline covers a lost master.
        self.stop_requested.wait(timeout=max(0.0, plan.hard_deadline + 2.0 - time.time()))
        self.sending = False
        if self.stop_reason == "server_died":
            self.inflight.join(timeout=DEAD_SERVER_GRACE_S)
        self.inflight.kill(block=True, timeout=5.0)  # each killed request records itself as cancelled
        self._flush()
        self.runner.send_message(
            MSG_DONE,
            {
                "worker_id": self.worker_id,
                "sent": self.sent,
                "cancelled": self.cancelled,
                "cpu_percent": self.cpu_percent,
                "pacers": self.pacers,
                "stop_reason": self.stop_reason or "deadline",
            },
        )
        self.finished.set()

    def _sleep_until(self, when) -> None:
        """Until when(self.plan), following the plan as it moves, or until stopped."""
        while not self.stop_requested.is_set():
            self._plan_moved.clear()
            delay = when(self.plan) - time.time()
            if delay <= 0:
                return
            gevent.wait([self.stop_requested, self._plan_moved], count=1, timeout=delay)

    def _flush_loop(self) -> None:
        last_counters = 0.0
        while not self.finished.is_set():
            gevent.sleep(FLUSH_INTERVAL_S)
            if self._outbox or time.time() - last_counters >= COUNTER_INTERVAL_S:
                self._flush()
                last_counters = time.time()

    def _flush(self) -> None:
        while True:
            batch, self._outbox = self._outbox[:MAX_RECORDS_PER_MESSAGE], self._outbox[MAX_RECORDS_PER_MESSAGE:]
            self.runner.send_message(
                MSG_RECORDS,
                {
                    "worker_id": self.worker_id,
                    "records": batch,
                    "sent": self.sent,
                    "in_flight": len(self.inflight),
                    "warm_users": self.warm_users,
                    "window_in_flight": self.in_window_inflight,
                    "late": self.late_first_tokens(time.time()),
                },
            )
            if not self._outbox:
                return


def _cpu_s(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def attach_worker_side(runner, make_session) -> None:
    """Register the listeners a load-generating process needs. `make_session(config)` is called on
    MSG_CONFIG (workers); a local runner creates its session directly and passes it in instead."""
    env = runner.environment

    def on_config(environment, msg, **_kw):
        # The master repeats the config until this worker answers READY: build the session once.
        if getattr(env, "llmbench_config", None) != msg.data:
            env.llmbench_session = make_session(msg.data)
            env.llmbench_config = msg.data
        runner.send_message(MSG_READY, {"worker_id": env.llmbench_session.worker_id})

    def on_plan(environment, msg, **_kw):
        env.llmbench_session.set_plan(msg.data)

    def on_window(environment, msg, **_kw):
        env.llmbench_session.move_plan(msg.data)

    def on_stop(environment, msg, **_kw):
        env.llmbench_session.request_stop((msg.data or {}).get("reason", "stop"))

    runner.register_message(MSG_CONFIG, on_config)
    runner.register_message(MSG_PLAN, on_plan)
    runner.register_message(MSG_WINDOW, on_window)
    runner.register_message(MSG_STOP, on_stop)
