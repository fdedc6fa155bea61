"""From `llmbench capacity`'s options to an answer: a sweep run directory whose levels a
CapacityPlan chooses, then the answer (analyzers.capacity.answer) recorded in run.json
(sweep.capacity, rundir.capacity.CapacityRecord) and capacity.json, and printed (or written to stdout as JSON).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass

import typer
from rich.console import Console

from analyzers.capacity.answer import capacity_answer, judge_loads
from analyzers.capacity.replicas import per_replica, replicas_for, with_fleet
from analyzers.stats.latency import LevelStats
from analyzers.stats.slo import Slos
from llmbench.capacity.search import CapacityPlan, SearchSpec
from llmbench.sweep.setup.args import SweepArgs
from llmbench.sweep.setup.execute import execute_sweep
from llmbench.sweep.setup.prepare import prepare_run
from llmbench.sweep.spec import spec_of
from llmbench.sweep.trace_level import sweep_trace
from reports.capacity_words import capacity_headline
from reports.replicas_words import replicas_for_words
from reports.write import write_reports
from rundir import RunDir, RunInfo
from rundir.capacity import CapacityAnswer, CapacityProbe, CapacityRecord
from rundir.files import CAPACITY_JSON
from rundir.record_json import record_to_dict
from rundir.table import RequestTable


@dataclass
class CapacityArgs:
    by: str | None  # None: concurrency, or rate for a trace
    start: float | None
    max_load: float | None
    resolution: float | None
    repeats: int
    json_out: bool
    stop_over_capacity: bool
    peak_rate: float | None = None  # --peak-rate: the replicas this rate needs, from the per-replica answer


def search_spec(c: CapacityArgs, trace_rate: float | None = None) -> SearchSpec:
    """The search these options ask for; a trace (trace_rate: its mean req/s at speed 1) is searched
    by rate from its own rate."""
    axis = c.by or ("rate" if trace_rate is not None else "concurrency")
    if trace_rate is not None and axis != "rate":
        raise typer.BadParameter(
            "a trace sends at its own times, so it is searched by rate (the trace replayed "
            "faster or slower): use --by rate",
            param_hint="--by",
        )
    rate = axis == "rate"
    try:
        return SearchSpec(
            axis=axis,
            start=c.start or (float(f"{trace_rate:.3g}") if trace_rate else 1.0),
            limit=c.max_load or (1000.0 if rate else 1024.0),
            resolution=c.resolution if c.resolution is not None else (0.1 if rate else 1.0),
            repeats=c.repeats,
            trace_rate=trace_rate,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _trace_rate(a: SweepArgs) -> float | None:
    """--workload trace: the trace's mean request rate at its own speed (None: not a trace)."""
    if a.workload != "trace":
        return None
    try:
        return sweep_trace(a).mean_rate()
    except ValueError as exc:  # no --dataset, no such file, not a trace
        raise typer.BadParameter(str(exc), param_hint="--dataset") from None


def _stats(run: RunDir) -> dict[str, LevelStats]:
    return {d["level_id"]: LevelStats.from_dict(d) for d in (run.read_summary() or {}).get("levels", [])}


def _loads(probes: list[CapacityProbe]) -> dict[float, list[str]]:
    out: dict[float, list[str]] = {}
    for p in probes:
        out.setdefault(p.load, []).append(p.level_id)
    return out


def answer_of(run: RunDir, info: RunInfo, plan: CapacityPlan) -> CapacityAnswer:
    stats = _stats(run)
    loads = {k: [x for x in v if x in stats] for k, v in _loads(plan.probes).items()}
    loads = {k: v for k, v in loads.items() if v}
    table = RequestTable.load(run)
    verdicts = judge_loads(table, loads, stats, Slos.of(info.slos)) if loads else []
    limit_reached = bool(loads) and max(loads) >= plan.search.key(plan.search.limit)
    answer = capacity_answer(plan.search.axis, verdicts, limit_reached)
    answer.trace_rate = plan.search.trace_rate
    return with_fleet(answer, table, info.target.replicas)


def run_capacity(a: SweepArgs, c: CapacityArgs, console: Console) -> None:
    if a.resume is not None:
        run, info, probe_names = prepare_run(a, console)
        search = recorded_search(info, a.resume)
    else:
        search = search_spec(c, _trace_rate(a))
        # The sweep's own validation and preflight see one level: the search's first.
        first = search.key(search.start)
        a.concurrency, a.request_rate = (f"{first:g}", None) if search.axis == "concurrency" else (None, f"{first:g}")
        speed = search.trace_speed(first)
        if speed is not None:  # a trace level is named by its rate, sent at its speed
            # Every load's level lasts --warmup + --duration, whatever its speed: the trace cycles
            # to fill it (or plays its first part), and each level's record says which.
            a.request_rate, a.trace_speed, a.trace_loop = None, speed, "capacity"
        run, info, probe_names = prepare_run(a, console)
        info.sweep.stop_over_capacity = c.stop_over_capacity
    plans: list[CapacityPlan] = []

    def factory(run: RunDir, info: RunInfo) -> CapacityPlan:
        plan: CapacityPlan = CapacityPlan(
            search, spec_of(info).levels()[0], judge=lambda probes: _unclear(run, info, plan)
        )
        plans.append(plan)
        return plan

    exit_code = 0
    try:
        execute_sweep(run, info, a, probe_names, console, plan_factory=factory)
    except typer.Exit as exc:  # stopped (fail fast, target gone): answer with what was measured
        exit_code = exc.exit_code
    if not plans or not run.exists():
        raise typer.Exit(code=exit_code or 1)
    plan = plans[0]
    info = run.read_info()
    answer = answer_of(run, info, plan)
    if exit_code and answer.bounded_by in ("none", "slo") and answer.lowest_out is None:
        answer.bounded_by = "errors"  # the search was stopped by failures, not by a verdict
    answer.headline = capacity_headline(answer)
    record = CapacityRecord(
        search=info.sweep.capacity.search if info.sweep.capacity else None, probes=list(plan.probes), answer=answer
    )
    info.sweep.capacity = record
    run.write_info(info)
    run.write_json(run.path / CAPACITY_JSON, record.to_dict())
    write_reports(run)  # the sweep wrote them before the answer existed; they lead with it
    each = per_replica(answer)
    need = replicas_for(c.peak_rate, each) if c.peak_rate is not None else None
    if c.json_out:
        fleet = {"per_replica": asdict(each), "replicas_for": asdict(need) if need is not None else None}
        sys.stdout.write(json.dumps({"run_dir": str(run.path), **record.to_dict(), **fleet}) + "\n")
    else:
        _print_answer(console, answer, run)
        if need is not None:
            console.print(replicas_for_words(need), highlight=False)
    if exit_code:
        raise typer.Exit(code=exit_code)


def recorded_search(info: RunInfo, path) -> SearchSpec:
    """The search a capacity run directory recorded (its options, not this command line's)."""
    record = info.sweep.capacity
    # A search this version could not read is kept, unread, in the record's extra (rundir/capacity.py).
    fields = (
        (record_to_dict(record.search) if record.search is not None else record.extra.get("search"))
        if record is not None
        else None
    )
    if not isinstance(fields, dict):
        raise typer.BadParameter(
            f"{path} is not a `llmbench capacity` run (run.json has no search); a sweep "
            "resumes with `llmbench sweep --resume`",
            param_hint="--resume",
        )
    try:
        return SearchSpec(**fields)
    except (TypeError, ValueError) as exc:
        raise typer.BadParameter(
            f"{path}: the search recorded in run.json is unreadable ({exc})", param_hint="--resume"
        ) from None


def _unclear(run: RunDir, info: RunInfo, plan: CapacityPlan) -> set[float]:
    """The loads whose neighbours are worth measuring: unclear on their values, not for want of
    requests (a neighbour has as few; the answer says to lengthen the levels instead)."""
    return {v.load for v in answer_of(run, info, plan).loads if v.verdict == "unclear" and not v.too_few}


def _print_answer(console: Console, answer: CapacityAnswer, run: RunDir) -> None:
    from reports.capacity_table import capacity_grid
    from reports.grid import print_grid

    print_grid(console, capacity_grid(answer))
    console.print(f"[bold]{capacity_headline(answer)}[/]", highlight=False)
    console.print(f"search and answer: {run.path / CAPACITY_JSON}; report: {run.report_html}")
