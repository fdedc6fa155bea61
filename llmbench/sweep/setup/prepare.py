"""The run directory for the options: the probes and the profile checked, then a new run (new_run.py)
or the one to resume (resume.py). Nothing is written until every option has been checked."""

from __future__ import annotations

import typer
from rich.console import Console

from llmbench.prediction import check_profile_option
from llmbench.sweep.setup.args import SweepArgs
from llmbench.sweep.setup.new_run import new_run
from llmbench.sweep.setup.resume import resumed_run
from rundir import RunDir, RunInfo


def prepare_run(a: SweepArgs, console: Console) -> tuple[RunDir, RunInfo, list[str]]:
    """Validate the options, then create the run directory (or open the one to resume)."""
    from probes.registry import parse_probe_list

    try:
        probe_names = parse_probe_list(a.probes)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--probes") from None
    if a.probe_interval <= 0:
        raise typer.BadParameter("must be > 0 seconds", param_hint="--probe-interval")
    check_profile_option(a.profile)
    run, info = resumed_run(a.resume, console) if a.resume is not None else new_run(a, console)
    return run, info, probe_names
