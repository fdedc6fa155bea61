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

from analyzers.stats.latency import LevelStats
from analyzers.summary import RunSummary, summary_of_levels
from analyzers.validity import mark_cut_short
from llmbench.prediction import predict_at_end
from llmbench.sweep.level import MeasuredLevel, measure_level
from llmbench.sweep.spec import SweepSpec
from loadgen.specs import LevelSpec, TargetSpec
from loadgen.trace_workload import trace_replay
from reports.answer import build_answer
from reports.grid import print_grid
from reports.level_sizing import sizing_line
from reports.prediction_table import print_prediction
from reports.terminal import print_answer, run_summary_table
from reports.trace_words import trace_words
from reports.write import read_diagnosis
from rundir import RunDir, RunInfo, SloSpec, TargetInfo


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

    def issued(self) -> list[LevelSpec]: ...  # every level handed out so far, in order

    def note(self, info: RunInfo) -> None: ...  # record the plan's state in run.json

    resume_command: str  # what continues an interrupted run of this plan


class FixedPlan:
    """The sweep's grid: every level of the spec, in order."""

    resume_command = "llmbench sweep --resume"

    def __init__(self, levels: list[LevelSpec], done: list[str] | None = None):
        self.levels = levels
        self.done = set(done or [])  # finished in an earlier attempt (resume): skipped

    def next_level(self, stats: dict[str, LevelStats]) -> LevelSpec | None:
        return next((lv for lv in self.levels if lv.level_id not in stats and lv.level_id not in self.done), None)

    def issued(self) -> list[LevelSpec]:
        return self.levels

    def note(self, info: RunInfo) -> None:
        pass


def host_facts() -> dict:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpus": __import__("os").cpu_count(),
    }


def new_run_info(run_id: str, spec: SweepSpec, target: TargetInfo, slos: SloSpec) -> RunInfo:
    return RunInfo(run_id=run_id, command=sys.argv, target=target, sweep=spec, slos=slos, host=host_facts())


@dataclass
class _SweepState:
    """What the level loop leaves behind: every level's stats so far, and why it stopped early."""

    stats: dict[str, LevelStats]
    interrupted: bool = False  # Ctrl-C
    stopped: str | None = None  # a level whose requests all failed
    gone: str | None = None  # the target stopped answering

    @property
    def status(self) -> str:
        return "interrupted" if self.interrupted or self.stopped or self.gone else "complete"

    def raise_if_stopped(self, resume: str) -> None:
        """Tell the caller why the sweep ended early (`resume`: the command that continues it)."""
        if self.gone:
            raise TargetGone(f"{self.gone}; the run directory keeps what was measured: {resume} once it is back")
        if self.stopped:
            raise SweepStopped(
                f"{self.stopped}\nthe run directory keeps what was measured; fix the cause, then {resume}"
            )
        if self.interrupted:
            raise KeyboardInterrupt


def _start(run: RunDir, info: RunInfo, probes) -> dict[str, LevelStats]:
    """Mark the run running, start the probes, and return the stats of the levels an earlier attempt finished."""
    info.status = "running"
    if probes is not None:
        info.probes.update(probes.start())  # name -> "ok" or why it cannot run here
    run.write_info(info)
    # Records of a level that did not finish would mix two attempts: set them aside (kept, not lost).
    run.set_aside_records(keep_levels=set(info.levels_done))
    return {
        s["level_id"]: LevelStats.from_dict(s)
        for s in (run.read_summary() or {}).get("levels", [])
        if s["level_id"] in info.levels_done
    }


def _carry_on(
    m: MeasuredLevel, state: _SweepState, info: RunInfo, target_alive: Callable[[], bool], console: Console
) -> bool:
    """Whether the sweep goes on after this level; if not, `state` says why."""
    level_id = m.level.level_id
    if m.result.failure is not None:
        state.stopped = f"level {level_id}: {m.result.failure}"
        console.print(f"[red]stopping the sweep: {state.stopped}[/]", highlight=False)
        return False
    if m.result.server_died or not target_alive():
        state.gone = f"the target stopped answering during {level_id}"
        console.print(f"[red]{state.gone}; stopping the sweep (resume with --resume)[/]")
        if not m.cut_short:  # it died after the level's last request: still not a full level
            mark_cut_short(m.lv, m.window.seconds, m.level.duration_s)
            info.level_meta[level_id].cut_short = True
        return False
    return True


def _finish(
    run: RunDir,
    info: RunInfo,
    plan: LevelPlan,
    state: _SweepState,
    slos: SloSpec,
    console: Console,
    profile: str | None = None,
) -> list[LevelStats]:
    """Write the final run.json, summary and reports, and show them; returns the levels in plan order."""
    info.status = state.status
    info.finished = time.time()
    plan.note(info)
    run.write_info(info)
    ordered, last = _write_summary(run, info, plan.issued(), state.stats, slos, console)
    if profile is not None:  # --profile: every level predicted, for the report to hold against it
        predict_at_end(run, profile, console)
    summary = _write_reports(run, console) or last
    if summary is None:
        return ordered  # said in one line; the run directory holds every record
    print_grid(console, run_summary_table(summary, title=f"run {info.run_id} ({info.status})"))
    print_prediction(console, summary.prediction)
    if isinstance(plan, FixedPlan):  # a search's caller states its own answer (llmbench capacity)
        print_answer(console, build_answer(summary, read_diagnosis(run)))  # the answer first, as the report
    return ordered


def run_sweep(
    spec: SweepSpec,
    run: RunDir,
    target: TargetSpec,
    console: Console,
    target_alive: Callable[[], bool] = lambda: True,
    slos: SloSpec | None = None,
    master_bind: str | None = None,
    probes=None,
    plan: LevelPlan | None = None,
    profile: str | None = None,
) -> list[LevelStats]:
    """Run the levels not yet done in `run` (all of them for a new run). Returns every level's stats.
    `probes` (a probes.runner.ProbeSet) samples from before the first level to after the last.
    `plan` chooses the levels (default: the spec's grid, FixedPlan). `profile`: a machine profile
    each level is also predicted from at the end (prediction.json, llmbench/prediction.py)."""
    info = run.read_info()
    slos = slos or info.slos
    plan = plan or FixedPlan(spec.levels(), info.levels_done)
    # A level whose queue keeps growing past the TTFT bound can only fail: stop it early.
    stop_ttft = slos.ttft_p99_s if spec.stop_over_capacity else None
    state = _SweepState(stats=_start(run, info, probes))
    try:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[stats]}"),
            console=console,
        ) as progress:
            while (level := plan.next_level(state.stats)) is not None:
                if level.level_id in info.levels_done:
                    raise RuntimeError(f"the plan asked for {level.level_id} again")  # a plan bug, not a loop
                level = dataclasses.replace(level, saturation_ttft_s=stop_ttft)
                m = measure_level(level, run, target, spec, progress, master_bind, slos)
                meta = info.level_meta[level.level_id] = m.meta()
                if spec.workload.kind == "trace":  # played once, in part or cycled: say which
                    meta.trace = trace_replay(spec.workload, level, sent=m.result.sent)
                    m.lv.notes.append(trace_words(meta.trace))
                    meta.notes.append(m.lv.notes[-1])
                    console.print(f"{level.level_id}: {m.lv.notes[-1]}", highlight=False, markup=False)
                line = sizing_line(level.level_id, meta, m.lv.ttft.n, level.max_duration_s)
                if line is not None:
                    console.print(line, highlight=False, markup=False)
                state.stats[level.level_id] = m.lv
                if not _carry_on(m, state, info, target_alive, console):
                    break
                info.levels_done.append(level.level_id)
                plan.note(info)
                run.write_info(info)
                _write_summary(run, info, plan.issued(), state.stats, slos, console)
    except KeyboardInterrupt:
        state.interrupted = True
        console.print("[yellow]interrupted: the run directory keeps everything measured so far[/]")
    finally:
        if probes is not None:
            info.probes.update(probes.outcome(probes.stop()))
    ordered = _finish(run, info, plan, state, slos, console, profile)
    state.raise_if_stopped(f"`{plan.resume_command} {run.path}`")
    return ordered


def _write_reports(run: RunDir, console: Console) -> RunSummary | None:
    """The P99 diagnosis, then report.html (which shows it), report.md, summary.csv and summary.json,
    rebuilt from the run directory."""
    try:
        from analyzers.triage.p99 import diagnose_p99, diagnosis_record, save_diagnosis

        diag = diagnose_p99(run)
        save_diagnosis(run, diagnosis_record(diag))
        console.print(
            f"P99 diagnosis: {diag.headline} (details: `llmdiag p99 {run.path}`)", highlight=False, markup=False
        )
    except Exception as exc:  # noqa: BLE001 - no records, or a diagnosis bug: the report goes on without it
        console.print(f"[yellow]no P99 diagnosis ({type(exc).__name__}: {exc})[/]")
    try:
        from reports.write import write_reports

        summary, paths = write_reports(run)
    except Exception as exc:  # noqa: BLE001 - a report bug must not cost the run: everything is on disk
        console.print(
            f"[yellow]could not write the report ({type(exc).__name__}: {exc}); "
            f"retry with `llmbench report {run.path}`[/]"
        )
        return None
    console.print(f"report: [bold]{paths['html']}[/]")
    return summary


def _write_summary(
    run: RunDir,
    info: RunInfo,
    levels: list[LevelSpec],
    stats: dict[str, LevelStats],
    slos: SloSpec,
    console: Console,
) -> tuple[list[LevelStats], RunSummary | None]:
    """summary.json after each level: the levels in plan order and their summary. An analysis bug says
    so in one line and the sweep goes on (its records are on disk, and `llmbench report RUN`
    summarizes them again): the summary is then None."""
    ordered = [stats[lv.level_id] for lv in levels if lv.level_id in stats]
    try:
        summary = summary_of_levels(info, slos, ordered)
    except Exception as exc:  # noqa: BLE001 - a bug in the analysis must not cost the run's measurement
        console.print(
            f"[yellow]could not summarize the levels so far ({type(exc).__name__}: {exc}); the sweep goes on "
            f"with every record on disk, and `llmbench report {run.path}` retries[/]",
            highlight=False,
        )
        return ordered, None
    run.write_summary(summary.to_dict())
    return ordered, summary


def default_run_dir(label: str) -> Path:
    return Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{label}"
