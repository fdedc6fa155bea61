"""run_level: one load level, driven from the caller's (unpatched) process.

The load itself runs in locust processes (loadgen.locust_proc): one LocalRunner process when
workers == 1, else a master plus `workers` worker processes on this machine (loopback). Records
travel worker -> master over locust's messaging (runner.send_message / register_message), and
master -> here as JSON lines on the master's stdout, flushed as they finish; a reader thread
moves them onto a queue so that a slow on_records callback never blocks the load processes.

Bounds: the locust processes get 60 s to start; after that the level ends by the plan's hard
deadline (warmup + duration + request_timeout + 1 s; a sized level's bounds at first, as its plan
moves the ones published later) plus a grace of KILL_GRACE_S, whatever the server does; then the
processes are killed. Ctrl-C stops the level the orderly way (in-flight
requests are recorded as cancelled) and is re-raised.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, BinaryIO, Callable

from loadgen.errors import LoadGeneratorError
from loadgen.fail_fast import FailFast
from loadgen.saturation import SaturationRule
from loadgen.specs import LevelProgress, LevelResult, LevelSpec, TargetSpec
from loadgen.tally import LevelTally
from loadgen.token_count import ClientTokenCounter, records_without_counting
from loadgen.workloads import Workload, level_workload_factory
from rundir import RequestRecord
from rundir.ports import free_port

STARTUP_TIMEOUT_S = 60.0
KILL_GRACE_S = 15.0  # past the plan's hard deadline (the coordinator gives up 11 s after it)
PROGRESS_INTERVAL_S = 0.5
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_level(
    spec: LevelSpec,
    target: TargetSpec,
    workload_factory: Callable[[LevelSpec], Workload] | None,
    on_records: Callable[[list[RequestRecord]], None],
    on_progress: Callable[[LevelProgress], None] | None = None,
    master_bind: str | None = None,
) -> LevelResult:
    """Run one level against `target` and return its counts and client health.

    workload_factory(spec) builds the level's Workload (None: random prompts of spec.input_len /
    spec.output_len); it runs here first, so a bad option or a missing dataset fails before any
    process starts, and its options are what the locust processes rebuild it from.
    master_bind="host:port": run a master there and wait for spec.workers workers started
    elsewhere (`python -m loadgen.locust_proc --worker --master-host ...`) instead of local ones.
    """
    workload = (workload_factory or level_workload_factory())(spec)
    if not workload.rebuildable:
        raise ValueError(
            "the workload was built with a length_fn, which cannot reach the locust processes: "
            "give WorkloadOptions.tokenizer instead"
        )
    if target.endpoint == "chat" and not isinstance(workload.spec(0).prompt, str):
        raise ValueError("the chat endpoint needs text prompts: use the sharegpt workload or endpoint='completions'")
    config = {"level": spec.to_dict(), "target": target.to_dict(), "workload": workload.options.to_dict()}
    with tempfile.TemporaryDirectory(prefix="llmbench-loadgen-") as logdir:
        procs: list[LocustProcess] = []  # filled as they start: a Ctrl-C while starting stops those
        loop = None
        try:
            _start_processes(spec, config, logdir, master_bind, procs)
            tokenizer = config["workload"].get("tokenizer")
            loop = _LevelLoop(
                spec,
                procs,
                on_records,
                on_progress,
                ClientTokenCounter(tokenizer).records if tokenizer else records_without_counting,
            )
            return loop.run()
        finally:
            # After a clean end the processes are already quitting: let them, rather than interrupt them.
            _stop_all(procs, polite_s=3.0 if loop is not None and loop.end is not None else 0.0)


# ----- processes ----------------------------------------------------------------------------


class LocustProcess(subprocess.Popen):
    """A locust process, with its command, its log file (the first's stderr; a worker's whole output)
    and, once stopped, the log's end."""

    cmd: list[str]
    log: BinaryIO
    log_tail: str = ""


def _start_processes(
    spec: LevelSpec, config: dict, logdir: str, master_bind: str | None, procs: list[LocustProcess]
) -> None:
    """Start the level's locust processes, appending each to `procs` as soon as it exists."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    base = [sys.executable, "-m", "loadgen.locust_proc"]
    # A session of their own: the terminal's Ctrl-C reaches only us, and we stop them in order.
    # Same working directory as the caller, so relative dataset and tokenizer paths mean the same.
    common: dict[str, Any] = dict(env=env, start_new_session=True)
    if spec.workers == 1 and master_bind is None:
        cmds = [base + ["--local"]]
    else:
        host, port = master_bind.rsplit(":", 1) if master_bind else ("127.0.0.1", str(free_port()))
        cmds = [base + ["--master", "--bind-host", host, "--port", port, "--expect-workers", str(spec.workers)]]
        if master_bind is None:
            cmds += [base + ["--worker", "--master-host", "127.0.0.1", "--port", port, "--once"]] * spec.workers
    for n, cmd in enumerate(cmds):
        log = open(os.path.join(logdir, f"proc{n}.log"), "w+b")
        if n == 0:
            p = LocustProcess(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, **common)
        else:
            p = LocustProcess(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, **common)
        p.log, p.cmd = log, cmd
        procs.append(p)
        if n == 0 and p.stdin is not None:  # a pipe: always, for the first
            p.stdin.write(json.dumps(config).encode())
            p.stdin.close()


def _stop_all(procs: list[LocustProcess], timeout: float = 5.0, polite_s: float = 0.0) -> None:
    """Wait polite_s for the processes to exit, then terminate, then kill; keep the end of each log.
    Idempotent."""
    procs = [p for p in procs if not p.log.closed]
    polite_until = time.monotonic() + polite_s
    for p in procs:
        try:
            p.wait(timeout=max(0.0, polite_until - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        p.log_tail = _read_tail(p.log)
        p.log.close()


def _read_tail(f, n: int = 3000) -> str:
    f.flush()
    f.seek(0, os.SEEK_END)
    f.seek(max(0, f.tell() - n))
    return f.read().decode("utf-8", "replace")


def arrivals_note(offered: int, achieved: int, window_s: float, lag_p99_s: float | None) -> str:
    """Open loop: the arrival rate the plan (or the trace) offered inside the window against the
    one the client achieved (requests that left inside it)."""
    lag = f", send lag P99 {lag_p99_s * 1000:.1f} ms" if lag_p99_s is not None else ""
    return (
        f"arrivals: offered {offered / window_s:.2f} req/s (planned in the window), achieved "
        f"{achieved / window_s:.2f} req/s (sent in it){lag}"
    )


# ----- the parent's loop --------------------------------------------------------------------


class _LevelLoop:
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
            _stop_all(self.procs)
            raise LoadGeneratorError(f"level {self.spec.level_id}: {self.error}\n{self._log_tail()}")
        if r.end_reason not in ("complete", "server_died", "interrupted", "failed_fast", "over_capacity"):
            _stop_all(self.procs)
            r.client_log_tail = self._log_tail()
        return r

    def _log_tail(self) -> str:
        return "\n".join(f"--- {' '.join(p.cmd[2:])}\n{p.log_tail}" for p in self.procs)
