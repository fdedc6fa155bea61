"""--resume: the run directory to go on with, its recorded plan read back as a SweepSpec (with what an
older run.json left unsaid filled in as that run behaved)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from rundir import RunDir, RunInfo


def resumed_run(path: Path, console: Console) -> tuple[RunDir, RunInfo]:
    from llmbench.sweep.spec import SweepSpec

    run = RunDir(path)
    if not run.exists():
        raise typer.BadParameter(f"{path} is not a run directory (no run.json)", param_hint="--resume")
    info = run.read_info()
    info.sweep = SweepSpec.of(info.sweep)
    if info.sweep.workload.kind == "trace" and "trace_loop" not in info.sweep.workload.recorded:
        # Recorded before a trace played once by default (no trace_loop key): it cycled, and goes on so.
        info.sweep.workload = info.sweep.workload.updated(trace_loop="--trace-loop")
    # A capacity search decides its levels as it goes: there is no total to count against.
    total = "" if info.sweep.is_capacity_search() else f" of {len(info.sweep.levels())}"
    console.print(f"resuming {path}: {len(info.levels_done)}{total} levels done")
    return run, info
