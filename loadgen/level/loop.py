"""The parent's loop over one level: the master's JSON lines read on a thread of their own (a slow
on_records never blocks the load processes), records tallied and handed on, progress reported,
the deadlines kept, the fail-fast and over-capacity rules applied, and the level's LevelResult
built from what the coordinator published (with the open loop's offered-vs-achieved note)."""

from __future__ import annotations

import json
import queue
import signal
import threading
import time

from loadgen.errors import LoadGeneratorError
from loadgen.fail_fast import FailFast
from loadgen.level.processes import LocustProcess, stop_all
from loadgen.saturation import SaturationRule
from loadgen.specs import LevelProgress, LevelResult, LevelSpec
from loadgen.tally import LevelTally

STARTUP_TIMEOUT_S = 60.0
KILL_GRACE_S = 15.0  # past the plan's hard deadline (the coordinator gives up 11 s after it)
PROGRESS_INTERVAL_S = 0.5


def arrivals_note(offered: int, achieved: int, window_s: float, lag_p99_s: float | None) -> str:
    """Open loop: the arrival rate the plan (or the trace) offered inside the window against the
    one the client achieved (requests that left inside it)."""
    lag = f", send lag P99 {lag_p99_s * 1000:.1f} ms" if lag_p99_s is not None else ""
    return (
        f"arrivals: offered {offered / window_s:.2f} req/s (planned in the window), achieved "
        f"{achieved / window_s:.2f} req/s (sent in it){lag}"
    )


class LevelLoop:
    def __init__(self, spec: LevelSpec, procs: list[LocustProcess], on_records, on_progress, make_records):
        self.spec, self.procs, self.on_records, self.on_progress = spec, procs, on_records, on_progress
        self.make_records = make_records
        self.tally = LevelTally(spec)
        self.fail_fast = FailFast()
        self.failed_fast: str | None = None  # why the level was stopped: all its first requests failed
        self.saturation = SaturationRule(spec.saturation_ttft_s) if spec.open_loop and spec.saturation_ttft_s else None
        self.over_capacity: str | None = None  # why the level was stopped: its queue kept growing
        self.offered = 0  # open loop: requests planned inside the window
        self.plan: dict | None = None
        self.worker_done: dict[str, dict] = {}
        self.sent_reported: int | None = None
        self.in_flight = 0
        self.unreadable_lines = 0
        self.stopped_at: float | None = None  # when the level was stopped before its end
        self.end: dict | None = None
        self.error: str | None = None
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read_lines, args=(procs[0].stdout,), daemon=True).start()

    def _read_lines(self, stream) -> None:
        for line in stream:
            self.lines.put(line)
        self.lines.put(None)  # EOF: the master/local process is gone

    def run(self) -> LevelResult:
        t0 = time.time()
        interrupted = False
        try:
            self._loop(t0)
        except KeyboardInterrupt:
            interrupted = True
            self._interrupt()
        result = self._result(time.time() - t0)
        if self.on_progress:
            self.on_progress(self._progress(done=True))
        if interrupted:
            raise KeyboardInterrupt
        return result

    def _loop(self, t0: float) -> None:
        deadline = t0 + STARTUP_TIMEOUT_S
        next_progress = t0
        while self.end is None and self.error is None:
            now = time.time()
            if now > deadline:
                self.error = "deadline" if self.plan else f"locust processes did not start in {STARTUP_TIMEOUT_S:g} s"
                break
            try:
                line = self.lines.get(timeout=min(PROGRESS_INTERVAL_S, max(0.01, deadline - now)))
            except queue.Empty:
                line = b""
            if line is None:
                self.error = "the locust process exited before the level ended"
                break
            if line:
                self._handle_line(line)
                if self.plan and deadline < self.plan["hard_deadline"] + KILL_GRACE_S:
                    deadline = self.plan["hard_deadline"] + KILL_GRACE_S
            if self.on_progress and time.time() >= next_progress:
                self.on_progress(self._progress())
                next_progress = time.time() + PROGRESS_INTERVAL_S
            if self.spec.fail_fast and self.end is None and self.failed_fast is None:
                self.failed_fast = self.fail_fast.reason()
                if self.failed_fast is not None:
                    self._interrupt(reason="failed_fast")
            if (
                self.saturation is not None
                and self.end is None
                and self.over_capacity is None
                and self.failed_fast is None
            ):
                self.over_capacity = self.saturation.reason()
                if self.over_capacity is not None:
                    self._interrupt(reason="over_capacity")

    def _interrupt(self, reason: str = "interrupted") -> None:
        """Ctrl-C (or fail fast): ask the master to stop in order, and take the cancelled records it
        sends back."""
        self.stopped_at = time.time()
        self.procs[0].send_signal(signal.SIGTERM)
        until = time.time() + 5.0
        while self.end is None and time.time() < until:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            if line is None:
                break
            self._handle_line(line)
        self.error = self.error or reason

    def _handle_line(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            # Only our JSON lines reach this pipe (fd_for_output points stray prints at stderr), so
            # an unreadable line is a lost message, perhaps of records: counted, never skipped silently.
            self.unreadable_lines += 1
            return
        self._handle(msg)

    def _handle(self, msg: dict) -> None:
        kind = msg["type"]
        if kind == "records":
            records = self.make_records(msg["records"])
            for r in records:
                self.tally.add(r)
                self.fail_fast.add(r)
                if self.saturation is not None:
                    self.saturation.add(r)
                if self.plan and self.plan["window_start"] <= r.t_scheduled < self.plan["window_end"]:
                    self.offered += 1
            self.on_records(records)
        elif kind == "plan":
            self.plan = msg
        elif kind == "progress":
            self.sent_reported, self.in_flight = msg["sent"], msg["in_flight"]
            if self.saturation is not None:
                self.saturation.add_in_flight(time.time(), msg["in_flight"], msg.get("late", 0))
        elif kind == "worker_done":
            self.worker_done[msg["worker_id"]] = msg
        elif kind == "done":
            self.end = msg
        elif kind == "error":
            self.error = msg["message"]

    def _progress(self, done: bool = False) -> LevelProgress:
        now, plan = time.time(), self.plan
        if done:
            phase = "done"
        elif plan is None:
            phase = "starting"
        else:
            phase = "warmup" if now < plan["window_start"] else "measuring" if now < plan["window_end"] else "draining"
        return LevelProgress(
            level_id=self.spec.level_id,
            phase=phase,
            elapsed_s=max(0.0, now - plan["t_start"]) if plan else 0.0,
            window_remaining_s=max(0.0, plan["window_end"] - max(now, plan["window_start"]))
            if plan
            else self.spec.duration_s,
            sent=max(self.sent_reported or 0, self.tally.finished),
            in_flight=self.in_flight,
            finished=self.tally.finished,
            ok=self.tally.ok,
            errors=self.tally.errors,
        )

    def _result(self, wall_s: float) -> LevelResult:
        sent_reported = sum(d["sent"] for d in self.worker_done.values()) if self.worker_done else self.sent_reported
        r = self.tally.result(self.worker_done, sent_reported)
        r.wall_s = wall_s
        r.unreadable_lines = self.unreadable_lines
        if self.plan:
            # The last plan the coordinator published: a sized level's moved times, and why they ended.
            r.t_start, r.window_start, r.window_end = (
                self.plan["t_start"],
                self.plan["window_start"],
                self.plan["window_end"],
            )
            r.warmup_end, r.window_end_by = self.plan["warmup_end"], self.plan["window_end_by"]
            if self.spec.open_loop:
                # A level stopped early offered its arrivals over the part of the window it ran.
                ran_until = min(r.window_end, self.stopped_at or r.window_end)
                if ran_until > r.window_start:
                    r.arrivals_note = arrivals_note(
                        self.offered, r.in_window, ran_until - r.window_start, r.send_lag_p99_s
                    )
        if self.failed_fast is not None:
            r.end_reason, r.failure = "failed_fast", self.failed_fast
        elif self.over_capacity is not None:
            r.end_reason, r.over_capacity = "over_capacity", self.over_capacity
        elif self.end is not None:
            r.end_reason, r.server_died = self.end["end_reason"], bool(self.end["server_died"])
        elif self.error in ("interrupted", "deadline"):
            r.end_reason = self.error
        else:
            stop_all(self.procs)
            raise LoadGeneratorError(f"level {self.spec.level_id}: {self.error}\n{self._log_tail()}")
        if r.end_reason not in ("complete", "server_died", "interrupted", "failed_fast", "over_capacity"):
            stop_all(self.procs)
            r.client_log_tail = self._log_tail()
        return r

    def _log_tail(self) -> str:
        return "\n".join(f"--- {' '.join(p.cmd[2:])}\n{p.log_tail}" for p in self.procs)
