"""One level of a sweep measured: the load run against the target, its records on disk as they
arrive with a live view of them, the window it really measured, and its statistics and notes
(run.json's level_meta entry). llmbench/sweep/run.py runs the levels one after another."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from rich.progress import Progress

from analyzers.bursts import server_itl_mean
from analyzers.probe_series import read_probe
from analyzers.stats.latency import LevelStats
from analyzers.stats.summarize import summarize_level
from analyzers.stats.window import Window
from analyzers.validity import INVALID_PREFIX, mark_cut_short, mark_over_capacity
from llmbench.sweep.spec import SweepSpec
from loadgen.level.run import run_level
from loadgen.specs import LevelProgress, LevelResult, LevelSpec, TargetSpec
from loadgen.workloads import level_workload_factory
from reports.level_sizing import bound_words
from rundir import LevelMeta, RequestRecord, RunDir, SloSpec


class LiveView:
    """Progress bar of one level with live TTFT/TPOT P50 from the records received so far."""

    def __init__(self, progress: Progress, level: LevelSpec):
        self.progress = progress
        self.total = level.warmup_s + level.duration_s  # a sized level's minimum: its bar fills, it goes on
        self.task = progress.add_task(level.level_id, total=self.total, stats="starting")
        self.start = time.monotonic()
        self.ttft: list[float] = []
        self.tpot: list[float] = []
        self.done = 0
        self.phase = "starting"

    def records(self, recs: list[RequestRecord]) -> None:
        for r in recs:
            self.done += 1
            if r.status == "ok" and r.ttft_s is not None:
                self.ttft.append(r.ttft_s)
            if r.tpot_s is not None:
                self.tpot.append(r.tpot_s)
        self.refresh()

    def refresh(self, p: LevelProgress | None = None) -> None:
        def p50(xs):
            return f"{sorted(xs)[len(xs) // 2] * 1000:.0f} ms" if xs else "—"

        self.phase = p.phase if p is not None else self.phase
        self.progress.update(
            self.task,
            completed=min(time.monotonic() - self.start, self.total),
            stats=f"{self.phase} · {self.done} done · TTFT P50 {p50(self.ttft)} · TPOT P50 {p50(self.tpot)}",
        )


@dataclass
class LevelSink:
    """run_level's on_records: each batch of records goes to the run directory, the level's own
    list (its stats) and the live view."""

    run: RunDir
    view: LiveView
    records: list[RequestRecord] = dataclasses.field(default_factory=list)

    def __call__(self, recs: list[RequestRecord]) -> None:
        self.run.append_records(recs)
        self.records.extend(recs)
        self.view.records(recs)


@dataclass
class MeasuredLevel:
    """One level as run: its spec, stats, the loader's result and the window really measured."""

    level: LevelSpec
    lv: LevelStats
    result: LevelResult
    window: Window
    cut_short: bool

    def meta(self) -> LevelMeta:
        """run.json's level_meta entry, so that `llmbench report` rebuilds the same summary from files."""
        r = self.result
        warmup = r.window_start - r.t_start if r.window_start is not None and r.t_start is not None else None
        meta = LevelMeta(
            window_s=self.window.seconds,
            window_start=self.window.start,
            window_end=self.window.end,
            nominal_s=self.level.duration_s,
            notes=client_notes(self.lv, r),
            cut_short=self.cut_short,
            over_capacity=r.over_capacity or None,
            warmup_s=warmup,
            warmup_end=r.warmup_end if r.window_start is not None else None,
            window_end_by=r.window_end_by if r.window_start is not None else None,
            sample_target=self.level.sample_target,
        )
        bound = bound_words(meta, self.lv.ttft.n, self.level.max_duration_s)
        if bound is not None and not self.cut_short:
            self.lv.notes.append(bound)
            meta.notes.append(bound)
        return meta


def measure_level(
    level: LevelSpec,
    run: RunDir,
    target: TargetSpec,
    spec: SweepSpec,
    progress: Progress,
    master_bind: str | None,
    slos: SloSpec,
) -> MeasuredLevel:
    view = LiveView(progress, level)
    sink = LevelSink(run, view)
    result = run_level(
        level,
        target,
        level_workload_factory(**spec.workload.options()),
        sink,
        on_progress=view.refresh,
        master_bind=master_bind,
    )
    window, cut_short = measured_window(level, result, sink.records)
    lv = summarize_level(sink.records, level.level_id, window, slos, server_itl_s=server_itl(run, sink, window))
    if result.end_reason == "over_capacity":
        mark_over_capacity(lv, result.over_capacity or "")
        cut_short = False  # stopped on purpose: it has a verdict (missed)
    elif cut_short:
        mark_cut_short(lv, window.seconds, level.duration_s)
    return MeasuredLevel(level, lv, result, window, cut_short)


def server_itl(run: RunDir, sink: LevelSink, window: Window) -> float | None:
    """The server's own ITL mean over the window, when a server probe ran: the reference that tells
    the streams the client read in one burst (analyzers/bursts.py) from fast ones."""
    start, end = window.start, window.end
    if (start is None or end is None) and sink.records:  # a level that ended before its window
        start = min(r.t_sent for r in sink.records)
        end = max(r.t_done or r.t_sent for r in sink.records)
    return server_itl_mean(read_probe(run.probe_file("server"), "server"), start, end)


def measured_window(level: LevelSpec, result: LevelResult, records: list[RequestRecord]) -> tuple[Window, bool]:
    """The window the level really measured: the plan's, or, for a level that ended early (the
    target died, every request failed), the part of it before the last request ended."""
    if result.window_start is None or result.window_end is None:
        return Window(level.duration_s), result.end_reason != "complete"  # ended before its window
    start, end = result.window_start, result.window_end
    cut_short = result.end_reason != "complete"
    if cut_short:
        last = max((r.t_done or r.t_sent for r in records), default=start)
        end = max(start, min(end, last))
    return Window(max(end - start, 1e-9), start, end), cut_short


def client_notes(lv: LevelStats, result: LevelResult) -> list[str]:
    notes = []
    if result.fell_behind:
        notes.append("INVALID: the client fell behind (" + "; ".join(result.fell_behind_reasons) + "); add --workers")
    if result.records_missing:
        # Lost records: what the level measured is incomplete, so it is no valid measurement.
        why = (
            f" ({result.unreadable_lines} unreadable line(s) from the load generator)"
            if result.unreadable_lines
            else ""
        )
        notes.append(f"{INVALID_PREFIX}{result.records_missing} requests sent but never reported by the client{why}")
    if result.server_died:
        notes.append("the target stopped answering during this level")
    if result.failure:
        notes.append(f"INVALID: stopped early, {result.failure}")
    if result.arrivals_note:
        notes.append(result.arrivals_note)
    lv.notes.extend(notes)
    return notes
