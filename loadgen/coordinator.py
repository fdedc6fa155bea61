"""The level's conductor inside the locust master (or the single local process).

It hands each worker its config, starts the users, publishes the Plan, forwards every record to
the parent process as it arrives, stops the level when all workers have drained their in-window
requests (or the server died, or the deadline passed) and waits for every worker's last word.
A sized level's plan moves while it runs (loadgen.sizing decides, from the records and counters
flowing in): each move is published again, to the workers (MSG_WINDOW) and the parent ("plan").

Output: JSON lines on a file descriptor (the parent's pipe), one object per line:
  {"type": "plan", ...Plan}                      once the users are spawned and the clock starts,
                                                 and again each time a sized level's plan moves
  {"type": "records", "records": [...]}          as records arrive, in batches
  {"type": "progress", "sent": n, "in_flight": n, "late": n}   late: in flight, no first token, past the TTFT bound
  {"type": "worker_done", "worker_id": ..., "cpu_percent": ..., ...}
  {"type": "stop", "reason": ...}
  {"type": "done", "end_reason": ..., "server_died": bool}
  {"type": "error", "message": ...}
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict

import gevent
import gevent.os
from gevent.event import Event
from gevent.lock import Semaphore

from loadgen.plan import Plan
from loadgen.session import (
    MSG_DONE,
    MSG_DRAINED,
    MSG_PLAN,
    MSG_READY,
    MSG_RECORDS,
    MSG_SERVER_DEAD,
    MSG_STOP,
    MSG_WINDOW,
)
from loadgen.sizing import LevelSizer
from loadgen.specs import LevelSpec

PROGRESS_INTERVAL_S = 0.5


class JsonLinesOut:
    """Cooperative writes to a pipe: a slow reader must not freeze the gevent loop (and with it the
    users' timestamps) on a blocking write. One line at a time: a write that meets a full pipe
    yields, and another greenlet's line must not land inside it (a records message is often larger
    than the pipe's buffer; interleaved, the parent could not parse it and its records were lost)."""

    def __init__(self, fd: int):
        self.fd = fd
        self._one_line_at_a_time = Semaphore()
        gevent.os.make_nonblocking(fd)

    def write(self, obj: dict) -> None:
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        with self._one_line_at_a_time:
            view = memoryview(data)
            while view:
                n = gevent.os.nb_write(self.fd, view)
                view = view[n:]


class Coordinator:
    def __init__(self, runner, level: LevelSpec, n_workers: int, out: JsonLinesOut):
        self.runner, self.level, self.n_workers, self.out = runner, level, n_workers, out
        self.ready: set[str] = set()
        self.drained: set[str] = set()
        self.done: dict[str, dict] = {}
        self.counters: dict[str, tuple[int, int, int]] = {}
        self.stop_reason: str | None = None
        self.server_died = False
        self.plan: Plan | None = None
        self.sizer: LevelSizer | None = None
        self.all_ready, self.all_done = Event(), Event()
        for msg_type, fn in (
            (MSG_READY, self._on_ready),
            (MSG_RECORDS, self._on_records),
            (MSG_DRAINED, self._on_drained),
            (MSG_SERVER_DEAD, self._on_server_dead),
            (MSG_DONE, self._on_done),
        ):
            runner.register_message(msg_type, fn)

    # ----- listeners (they only record and forward; nothing here blocks) --------------------
    def _on_ready(self, environment, msg, **_kw) -> None:
        self.ready.add(msg.data["worker_id"])
        if len(self.ready) >= self.n_workers:
            self.all_ready.set()

    def _on_records(self, environment, msg, **_kw) -> None:
        d = msg.data
        self.counters[d["worker_id"]] = (d["sent"], d["in_flight"], d.get("late", 0))
        if d["records"]:
            self.out.write({"type": "records", "records": d["records"]})
        if self.sizer is not None and self.plan is not None and self.stop_reason is None:
            self.sizer.add(d["worker_id"], d)
            moved = self.sizer.decide(self.plan, time.time())
            if moved is not None:
                self._publish(moved, MSG_WINDOW)

    def _on_drained(self, environment, msg, **_kw) -> None:
        self.drained.add(msg.data["worker_id"])
        if len(self.drained) >= self.n_workers:
            self.stop("drained")

    def _on_server_dead(self, environment, msg, **_kw) -> None:
        self.server_died = True
        self.stop("server_died")

    def _on_done(self, environment, msg, **_kw) -> None:
        self.done[msg.data["worker_id"]] = msg.data
        self.out.write({"type": "worker_done", **msg.data})
        if len(self.done) >= self.n_workers:
            self.all_done.set()

    # ----- driving the level ---------------------------------------------------------------
    def stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self.out.write({"type": "stop", "reason": reason})
        self.runner.send_message(MSG_STOP, {"reason": self.stop_reason})

    def run(self, user_class: type, user_count: int, lead_s: float) -> str:
        """Spawn the users, publish the plan, wait for the end. Returns the end reason."""
        self.runner.start(user_count, spawn_rate=max(1, user_count), user_classes=[user_class])
        spawning = getattr(self.runner, "spawning_greenlet", None)
        if spawning is not None:  # LocalRunner spawns in a greenlet; MasterRunner.start blocks
            spawning.join()
        sizer = LevelSizer(self.level, user_count)
        self.sizer = sizer if sizer.active else None
        self._publish(Plan.starting_at(time.time() + lead_s, self.level), MSG_PLAN)
        progress = gevent.spawn(self._progress_loop)
        try:
            # Workers stop themselves by hard_deadline + 2 s at the latest; past that, give up on them.
            # A sized level's deadline moves (earlier) while it runs: wait for the current one.
            while not self.all_done.wait(
                timeout=max(0.0, min(1.0, self.current_plan.hard_deadline + 6.0 - time.time()))
            ):
                if time.time() >= self.current_plan.hard_deadline + 6.0:
                    self.stop("deadline")
                    self.all_done.wait(timeout=5.0)
                    break
        finally:
            progress.kill()
        if self.server_died:
            reason = "server_died"
        elif self.stop_reason == "drained":
            reason = "complete" if len(self.done) >= self.n_workers else "deadline"
        else:
            reason = self.stop_reason or "deadline"
        self.out.write(
            {"type": "done", "end_reason": reason, "server_died": self.server_died, "workers_done": len(self.done)}
        )
        return reason

    @property
    def current_plan(self) -> Plan:
        """The level's plan as it stands (published before the level's deadline is first read)."""
        assert self.plan is not None, "the coordinator publishes the plan before it waits on it"
        return self.plan

    def _publish(self, plan: Plan, msg_type: str) -> None:
        self.plan = plan
        self.out.write({"type": "plan", **asdict(plan)})
        self.runner.send_message(msg_type, asdict(plan))

    def _progress_loop(self) -> None:
        while True:
            gevent.sleep(PROGRESS_INTERVAL_S)
            sent = sum(c[0] for c in self.counters.values())
            in_flight = sum(c[1] for c in self.counters.values())
            late = sum(c[2] for c in self.counters.values())
            self.out.write({"type": "progress", "sent": sent, "in_flight": in_flight, "late": late})


def user_count_for(level: LevelSpec, n_workers: int) -> int:
    """Closed loop: `concurrency` users over all workers; open loop: one pacer per worker."""
    return level.concurrency if level.concurrency is not None else n_workers  # closed loop: concurrency set


def fd_for_output() -> int:
    """Take over stdout for the JSON lines and point fd 1 at stderr, so that a stray print from
    any library cannot corrupt the stream."""
    fd = os.dup(1)
    os.dup2(2, 1)
    return fd
