"""A sweep: levels of load (concurrency or request rate × input length × output length), each
warmed up and measured, written to a run directory as it goes, summarized at the end.

The loop tolerates everything a target can do wrong: a level whose server died ends early, the
run is marked `interrupted` with all that was measured so far, and `--resume` picks it up at
the first level that did not finish.
"""

from __future__ import annotations

import dataclasses
import platform
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from analyzers.bursts import server_itl_mean
from analyzers.probe_series import read_probe
from analyzers.stats.latency import LevelStats, Window, summarize_level
from analyzers.summary import RunSummary, summary_of_levels
from analyzers.validity import INVALID_PREFIX, mark_cut_short, mark_over_capacity
from llmbench.sweep.spec import SweepSpec
from loadgen.level import run_level
from loadgen.specs import LevelProgress, LevelResult, LevelSpec, TargetSpec
from loadgen.workloads import level_workload_factory
from reports.answer import build_answer
from reports.level_sizing import bound_words, sizing_line
from reports.terminal import answer_lines, run_summary_table
from reports.write import read_diagnosis
from rundir import LevelMeta, RequestRecord, RunDir, RunInfo, SloSpec, TargetInfo


class SweepStopped(RuntimeError):
    """The sweep stopped before its end for a reason the user must fix (every request failed)."""

    exit_code = 1


class TargetGone(SweepStopped):
    """The target stopped answering in the middle of the sweep."""

    exit_code = 3


class LevelPlan(Protocol):
    """Which level to run next, given the stats of the levels measured so far (a fixed grid, or a
    search such as llmbench.capacity.search's). Deterministic in the stats, so a resumed run re-decides
    the same levels and skips the ones already done."""

    def next_level(self, stats: dict[str, LevelStats]) -> LevelSpec | None: ...

    def issued(self) -> list[LevelSpec]: ...          # every level handed out so far, in order

    def note(self, info: RunInfo) -> None: ...        # record the plan's state in run.json

    resume_command: str                               # what continues an interrupted run of this plan


class FixedPlan:
    """The sweep's grid: every level of the spec, in order."""

    resume_command = "llmbench sweep --resume"

    def __init__(self, levels: list[LevelSpec], done: list[str] | None = None):
        self.levels = levels
        self.done = set(done or [])         # finished in an earlier attempt (resume): skipped

    def next_level(self, stats: dict[str, LevelStats]) -> LevelSpec | None:
        return next((lv for lv in self.levels if lv.level_id not in stats and lv.level_id not in self.done), None)

    def issued(self) -> list[LevelSpec]:
        return self.levels

    def note(self, info: RunInfo) -> None:
        pass


def host_facts() -> dict:
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "python": sys.version.split()[0],
            "cpus": __import__("os").cpu_count()}


def new_run_info(run_id: str, spec: SweepSpec, target: TargetInfo, slos: SloSpec) -> RunInfo:
    return RunInfo(run_id=run_id, command=sys.argv, target=target, sweep=spec,
                   slos=slos, host=host_facts())


class _LiveView:
    """Progress bar of one level with live TTFT/TPOT P50 from the records received so far."""

    def __init__(self, progress: Progress, level: LevelSpec):
        self.progress = progress
        total = level.warmup_s + level.duration_s     # a sized level's minimum: its bar fills, it goes on
        self.task = progress.add_task(level.level_id, total=total, stats="starting")
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
        self.progress.update(self.task, completed=min(time.monotonic() - self.start, self.progress.tasks[
            self.task].total), stats=f"{self.phase} · {self.done} done · TTFT P50 {p50(self.ttft)} · "
                                     f"TPOT P50 {p50(self.tpot)}")


@dataclass
class _SweepState:
    """What the level loop leaves behind: every level's stats so far, and why it stopped early."""

    stats: dict[str, LevelStats]
    interrupted: bool = False       # Ctrl-C
    stopped: str | None = None      # a level whose requests all failed
    gone: str | None = None         # the target stopped answering

    @property
    def status(self) -> str:
        return "interrupted" if self.interrupted or self.stopped or self.gone else "complete"

    def raise_if_stopped(self, resume: str) -> None:
        """Tell the caller why the sweep ended early (`resume`: the command that continues it)."""
        if self.gone:
            raise TargetGone(f"{self.gone}; the run directory keeps what was measured: {resume} once it is back")
        if self.stopped:
            raise SweepStopped(f"{self.stopped}\nthe run directory keeps what was measured; fix the cause, then "
                               f"{resume}")
        if self.interrupted:
            raise KeyboardInterrupt


@dataclass
class _LevelSink:
    """run_level's on_records: each batch of records goes to the run directory, the level's own
    list (its stats) and the live view."""

    run: RunDir
    view: _LiveView
    records: list[RequestRecord] = dataclasses.field(default_factory=list)

    def __call__(self, recs: list[RequestRecord]) -> None:
        self.run.append_records(recs)
        self.records.extend(recs)
        self.view.records(recs)


@dataclass
class _Measured:
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
        meta = LevelMeta(window_s=self.window.seconds, window_start=self.window.start, window_end=self.window.end,
                         nominal_s=self.level.duration_s, notes=_add_client_notes(self.lv, r),
                         cut_short=self.cut_short, over_capacity=r.over_capacity or None,
                         warmup_s=warmup, warmup_end=r.warmup_end if r.window_start is not None else None,
                         window_end_by=r.window_end_by if r.window_start is not None else None,
                         sample_target=self.level.sample_target)
        bound = bound_words(meta, self.lv.ttft.n, self.level.max_duration_s)
        if bound is not None and not self.cut_short:
            self.lv.notes.append(bound)
            meta.notes.append(bound)
        return meta



def _start(run: RunDir, info: RunInfo, probes) -> dict[str, LevelStats]:
    """Mark the run running, start the probes, and return the stats of the levels an earlier attempt finished."""
    info.status = "running"
    if probes is not None:
        info.probes.update(probes.start())     # name -> "ok" or why it cannot run here
    run.write_info(info)
    # Records of a level that did not finish would mix two attempts: set them aside (kept, not lost).
    run.set_aside_records(keep_levels=set(info.levels_done))
    return {s["level_id"]: LevelStats.from_dict(s) for s in (run.read_summary() or {}).get("levels", [])
            if s["level_id"] in info.levels_done}


def _measure(level: LevelSpec, run: RunDir, target: TargetSpec, spec: SweepSpec, progress: Progress,
             master_bind: str | None, slos: SloSpec) -> _Measured:
    view = _LiveView(progress, level)
    sink = _LevelSink(run, view)
    result = run_level(level, target, level_workload_factory(**spec.workload), sink,
                       on_progress=view.refresh, master_bind=master_bind)
    window, cut_short = _measured_window(level, result, sink.records)
    lv = summarize_level(sink.records, level.level_id, window, slos, server_itl_s=_server_itl(run, sink, window))
    if result.end_reason == "over_capacity":
        mark_over_capacity(lv, result.over_capacity or "")
        cut_short = False           # stopped on purpose: it has a verdict (missed)
    elif cut_short:
        mark_cut_short(lv, window.seconds, level.duration_s)
    return _Measured(level, lv, result, window, cut_short)


def _server_itl(run: RunDir, sink: _LevelSink, window: Window) -> float | None:
    """The server's own ITL mean over the window, when a server probe ran: the reference that tells
    the streams the client read in one burst (analyzers/bursts.py) from fast ones."""
    start, end = window.start, window.end
    if (start is None or end is None) and sink.records:        # a level that ended before its window
        start = min(r.t_sent for r in sink.records)
        end = max(r.t_done or r.t_sent for r in sink.records)
    return server_itl_mean(read_probe(run.probe_file("server"), "server"), start, end)


def _carry_on(m: _Measured, state: _SweepState, info: RunInfo, target_alive: Callable[[], bool],
              console: Console) -> bool:
    """Whether the sweep goes on after this level; if not, `state` says why."""
    level_id = m.level.level_id
    if m.result.failure is not None:
        state.stopped = f"level {level_id}: {m.result.failure}"
        console.print(f"[red]stopping the sweep: {state.stopped}[/]", highlight=False)
        return False
    if m.result.server_died or not target_alive():
        state.gone = f"the target stopped answering during {level_id}"
        console.print(f"[red]{state.gone}; stopping the sweep (resume with --resume)[/]")
        if not m.cut_short:          # it died after the level's last request: still not a full level
            mark_cut_short(m.lv, m.window.seconds, m.level.duration_s)
            info.level_meta[level_id].cut_short = True
        return False
    return True


def _finish(run: RunDir, info: RunInfo, plan: LevelPlan, state: _SweepState, slos: SloSpec,
            console: Console) -> list[LevelStats]:
    """Write the final run.json, summary and reports, and show them; returns the levels in plan order."""
    info.status = state.status
    info.finished = time.time()
    plan.note(info)
    run.write_info(info)
    ordered = _write_summary(run, info, plan.issued(), state.stats, slos)
    summary = _write_reports(run, console) or summary_of_levels(info, slos, ordered)
    console.print(run_summary_table(summary, title=f"run {info.run_id} ({info.status})", width=console.width))
    if isinstance(plan, FixedPlan):     # a search's caller states its own answer (llmbench capacity)
        for line in answer_lines(build_answer(summary, read_diagnosis(run))):      # the answer first, as the report
            console.print(line, highlight=False)
    return ordered


def run_sweep(spec: SweepSpec, run: RunDir, target: TargetSpec, console: Console,
              target_alive: Callable[[], bool] = lambda: True, slos: SloSpec | None = None,
              master_bind: str | None = None, probes=None, plan: LevelPlan | None = None) -> list[LevelStats]:
    """Run the levels not yet done in `run` (all of them for a new run). Returns every level's stats.
    `probes` (a probes.runner.ProbeSet) samples from before the first level to after the last.
    `plan` chooses the levels (default: the spec's grid, FixedPlan)."""
    info = run.read_info()
    slos = slos or info.slos
    plan = plan or FixedPlan(spec.levels(), info.levels_done)
    # A level whose queue keeps growing past the TTFT bound can only fail: stop it early.
    stop_ttft = slos.ttft_p99_s if spec.stop_over_capacity else None
    state = _SweepState(stats=_start(run, info, probes))
    try:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TimeElapsedColumn(),
                      TextColumn("{task.fields[stats]}"), console=console) as progress:
            while (level := plan.next_level(state.stats)) is not None:
                if level.level_id in info.levels_done:
                    raise RuntimeError(f"the plan asked for {level.level_id} again")   # a plan bug, not a loop
                level = dataclasses.replace(level, saturation_ttft_s=stop_ttft)
                m = _measure(level, run, target, spec, progress, master_bind, slos)
                meta = info.level_meta[level.level_id] = m.meta()
                line = sizing_line(level.level_id, meta, m.lv.ttft.n, level.max_duration_s)
                if line is not None:
                    console.print(line, highlight=False, markup=False)
                state.stats[level.level_id] = m.lv
                if not _carry_on(m, state, info, target_alive, console):
                    break
                info.levels_done.append(level.level_id)
                plan.note(info)
                run.write_info(info)
                _write_summary(run, info, plan.issued(), state.stats, slos)
    except KeyboardInterrupt:
        state.interrupted = True
        console.print("[yellow]interrupted: the run directory keeps everything measured so far[/]")
    finally:
        if probes is not None:
            info.probes.update(probes.outcome(probes.stop()))
    ordered = _finish(run, info, plan, state, slos, console)
    state.raise_if_stopped(f"`{plan.resume_command} {run.path}`")
    return ordered


def _measured_window(level: LevelSpec, result: LevelResult, records: list[RequestRecord]) -> tuple[Window, bool]:
    """The window the level really measured: the plan's, or, for a level that ended early (the
    target died, every request failed), the part of it before the last request ended."""
    if result.window_start is None or result.window_end is None:
        return Window(level.duration_s), result.end_reason != "complete"   # ended before its window
    start, end = result.window_start, result.window_end
    cut_short = result.end_reason != "complete"
    if cut_short:
        last = max((r.t_done or r.t_sent for r in records), default=start)
        end = max(start, min(end, last))
    return Window(max(end - start, 1e-9), start, end), cut_short


def _add_client_notes(lv: LevelStats, result: LevelResult) -> list[str]:
    notes = []
    if result.fell_behind:
        notes.append("INVALID: the client fell behind (" + "; ".join(result.fell_behind_reasons) + "); add --workers")
    if result.records_missing:
        # Lost records: what the level measured is incomplete, so it is no valid measurement.
        why = (f" ({result.unreadable_lines} unreadable line(s) from the load generator)"
               if result.unreadable_lines else "")
        notes.append(f"{INVALID_PREFIX}{result.records_missing} requests sent but never reported by the client{why}")
    if result.server_died:
        notes.append("the target stopped answering during this level")
    if result.failure:
        notes.append(f"INVALID: stopped early, {result.failure}")
    if result.arrivals_note:
        notes.append(result.arrivals_note)
    lv.notes.extend(notes)
    return notes


def _write_reports(run: RunDir, console: Console) -> RunSummary | None:
    """The P99 diagnosis, then report.html (which shows it), report.md, summary.csv and summary.json,
    rebuilt from the run directory."""
    try:
        from analyzers.triage.p99 import diagnose_p99, diagnosis_record, save_diagnosis

        diag = diagnose_p99(run)
        save_diagnosis(run, diagnosis_record(diag))
        console.print(f"P99 diagnosis: {diag.headline} (details: `llmdiag p99 {run.path}`)", highlight=False,
                      markup=False)
    except Exception as exc:  # noqa: BLE001 - no records, or a diagnosis bug: the report goes on without it
        console.print(f"[yellow]no P99 diagnosis ({type(exc).__name__}: {exc})[/]")
    try:
        from reports.write import write_reports

        summary, paths = write_reports(run)
    except Exception as exc:  # noqa: BLE001 - a report bug must not cost the run: everything is on disk
        console.print(f"[yellow]could not write the report ({type(exc).__name__}: {exc}); "
                      f"retry with `llmbench report {run.path}`[/]")
        return None
    console.print(f"report: [bold]{paths['html']}[/]")
    return summary


def _write_summary(run: RunDir, info: RunInfo, levels: list[LevelSpec], stats: dict[str, LevelStats],
                   slos: SloSpec) -> list[LevelStats]:
    ordered = [stats[lv.level_id] for lv in levels if lv.level_id in stats]
    run.write_summary(summary_of_levels(info, slos, ordered).to_dict())
    return ordered


def default_run_dir(label: str) -> Path:
    return Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{label}"
