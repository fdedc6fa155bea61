"""Run a set of probes in background threads on the run's clock (time.time()).

Each probe gets its own thread: a slow scrape of a remote /metrics page must not delay the
host or IRQ samples. The thread measures its own CPU time around each sample (thread_time), so
the probes' cost is recorded next to what they observed (probes/_cost.json at stop).
A sample that raises is logged once per distinct message and the probe keeps going: one bad
read must not end a series that the P99 diagnosis needs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from probes.base import JsonlAppender, Probe, ProbeContext, ProbeUnavailable
from probes.registry import make_probe
from rundir import RunDir, files

Log = Callable[[str], None]
# start() returns once every probe has written its first row (or its interval and this long have
# passed), so each series begins before the run's first request. A rate probe (host CPU, IRQs) writes
# its first row one interval after its baseline; a probe slower than this (a remote scrape) starts late.
FIRST_ROW_SLACK_S = 5.0


@dataclass
class ProbeStats:
    samples: int = 0
    rows: int = 0
    errors: int = 0
    cpu_s: float = 0.0  # thread CPU time spent inside sample() (not children like `ss`)
    wall_s: float = 0.0
    error_messages: list[str] = field(default_factory=list)
    failure: str | None = None  # the probe's own word that its rows measured nothing (Probe.failure)
    shortfall: str | None = None  # what it measured only in part (Probe.shortfall)


class _ProbeThread(threading.Thread):
    def __init__(self, probe: Probe, out: JsonlAppender, log: Log):
        super().__init__(name=f"probe-{probe.name}", daemon=True)
        self.probe, self.out, self.log = probe, out, log
        self.stop_event = threading.Event()
        self.first_row = threading.Event()
        self.stats = ProbeStats()

    def run(self) -> None:
        start = time.monotonic()
        next_at = start
        while not self.stop_event.is_set():
            self._one_sample()
            if self.stats.rows or self.stats.errors:  # a row, or a failing probe: nothing to wait for
                self.first_row.set()
            next_at += self.probe.interval_s
            # Fixed-rate schedule; after a long stall, skip the missed ticks rather than bursting.
            delay = next_at - time.monotonic()
            if delay < 0:
                next_at = time.monotonic()
                delay = 0
            self.stop_event.wait(delay)
        # One last sample at stop, so counters and deltas cover the run up to its very end.
        self.probe.stopping = True
        self._one_sample()
        self.stats.wall_s = time.monotonic() - start
        try:
            self.stats.failure = self.probe.failure()
            self.stats.shortfall = self.probe.shortfall()
        except Exception as exc:  # noqa: BLE001 - a probe must never take the run down
            self.log(f"probe {self.probe.name}: failure() or shortfall() raised ({type(exc).__name__}: {exc})")

    def _one_sample(self) -> None:
        c0 = time.thread_time()
        try:
            row = self.probe.sample()
            if row is not None:
                self.out.append({"t": row.pop("t", time.time()), **row})
                self.stats.rows += 1
        except Exception as exc:  # noqa: BLE001 - a probe must never take the run down
            self.stats.errors += 1
            msg = f"{type(exc).__name__}: {exc}"
            if msg not in self.stats.error_messages:
                self.stats.error_messages.append(msg)
                if len(self.stats.error_messages) <= 5:
                    self.log(f"probe {self.probe.name}: sample failed ({msg}); continuing")
        self.stats.samples += 1
        self.stats.cpu_s += time.thread_time() - c0


class ProbeSet:
    """Start the named probes; `start()` returns name -> "ok" or why it cannot run (RunInfo.probes)."""

    def __init__(self, names: list[str], ctx: ProbeContext, log: Log = print):
        self.names = list(names)
        self.ctx = ctx
        self.log = log
        self.threads: list[_ProbeThread] = []
        self.availability: dict[str, str] = {}

    def start(self) -> dict[str, str]:
        (self.ctx.out_dir / files.PROBES_DIR).mkdir(parents=True, exist_ok=True)
        for name in self.names:
            try:
                probe = make_probe(name, self.ctx)
                probe.check()
            except ProbeUnavailable as exc:
                self.availability[name] = f"unavailable: {exc}"
                self.log(f"probe {name} cannot run here: {exc}")
                continue
            out = JsonlAppender(RunDir(self.ctx.out_dir).probe_file(name))  # the run-directory contract
            thread = _ProbeThread(probe, out, self.log)
            self.threads.append(thread)
            self.availability[name] = "ok"
        for thread in self.threads:
            thread.start()
        # Each series must cover the run from its first request (the P99 diagnosis lines evidence up
        # with requests in time): the caller sends nothing before every probe has written a row.
        started = time.monotonic()
        for thread in self.threads:
            wait = thread.probe.interval_s + FIRST_ROW_SLACK_S
            if not thread.first_row.wait(max(0.0, started + wait - time.monotonic())):
                self.log(f"probe {thread.probe.name}: no row within {wait:.0f} s of its start; the run goes on")
        return dict(self.availability)

    def outcome(self, stats: dict[str, ProbeStats]) -> dict[str, str]:
        """RunInfo.probes after the run: a probe that sampled and never recorded a row did not
        measure anything ("failed: ..." with its first error), whatever its check said at start;
        nor did one whose rows all say it failed (the server probe's every scrape 404ing writes
        rows of {up: 0, error}): "failed: ..." in its own words (Probe.failure). One that measured
        only part of what it was asked (a fleet's replica never read) is "partial: ..." (Probe.shortfall)."""
        out = dict(self.availability)
        for name, s in stats.items():
            if s.samples and not s.rows:
                why = s.error_messages[0] if s.error_messages else "every sample came back empty"
                out[name] = f"failed: none of its {s.samples} samples succeeded ({why})"
            elif s.failure:
                out[name] = f"failed: {s.failure}"
            elif s.shortfall:
                out[name] = f"partial: {s.shortfall}"
        return out

    def stop(self) -> dict[str, ProbeStats]:
        for thread in self.threads:
            thread.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=30)
            try:
                last = thread.probe.close()
                if last is not None:
                    thread.out.append({"t": last.pop("t", time.time()), **last})
            except Exception as exc:  # noqa: BLE001
                self.log(f"probe {thread.probe.name}: close failed ({type(exc).__name__}: {exc})")
            thread.out.close()
        stats = {t.probe.name: t.stats for t in self.threads}
        self._write_cost(stats)
        self.threads = []
        return stats

    def _write_cost(self, stats: dict[str, ProbeStats]) -> None:
        cost = {
            name: {
                "samples": s.samples,
                "rows": s.rows,
                "errors": s.errors,
                "cpu_s": round(s.cpu_s, 4),
                "wall_s": round(s.wall_s, 3),
                "cpu_per_wall_s": round(s.cpu_s / s.wall_s, 5) if s.wall_s else None,
                "error_messages": s.error_messages[:5],
            }
            for name, s in stats.items()
        }
        RunDir(self.ctx.out_dir).write_json(RunDir(self.ctx.out_dir).probe_cost_json, cost)

    def __enter__(self) -> "ProbeSet":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def sweep_probe_set(
    names: list[str],
    run_path,
    target_url: str | None,
    server_pid: int | None,
    interval_s: float,
    log: Log = print,
    replica_metrics: list[str] | None = None,
    replica_pids: dict[str, int] | None = None,
) -> ProbeSet | None:
    """The ProbeSet a sweep runs around its levels (None when no probe was asked for); replica_metrics:
    a fleet's own /metrics pages, one per replica, for the server probe; replica_pids: the other local
    replicas' server processes of a fleet driven directly, by replica name, for the host probe."""
    if not names:
        return None
    ctx = ProbeContext(
        out_dir=run_path,
        target_url=target_url,
        server_pid=server_pid,
        interval_s=interval_s,
        replica_metrics=list(replica_metrics or []),
        replica_pids=dict(replica_pids or {}),
    )
    return ProbeSet(names, ctx, log=log)
