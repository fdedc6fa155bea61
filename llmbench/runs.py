"""`llmbench runs [DIR]`: the run directories under DIR, one line each (newest first): when, the
model and target, its levels, its status, and its answer (the highest level within the SLO, or a
capacity search's answer)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import typer

from analyzers.capacity.answer import answer_in
from llmbench.cli_common import make_console
from reports.grid import Column, Grid, print_grid
from rundir import RunDir, SweepInfo
from rundir.errors import RunDirError

console = make_console()


@dataclass
class RunLine:
    path: str
    run_id: str
    started: str  # UTC, to the minute
    status: str
    model: str
    target: str  # "embedded" or the URL
    levels: int
    answer: str  # the highest level within the SLO, a capacity, or why there is none


def run_lines(folder: Path) -> list[RunLine]:
    """Every run directory directly under `folder`, newest first; unreadable ones are skipped."""
    out: list[tuple[float, RunLine]] = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        run = RunDir(sub)
        if not run.exists():
            continue
        try:
            info = run.read_info()
            summary = run.read_summary() or {}
        except (RunDirError, ValueError, OSError):
            continue
        target = "embedded" if info.target.kind == "embedded" else str(info.target.url)
        out.append(
            (
                info.started,
                RunLine(
                    str(sub),
                    info.run_id,
                    time.strftime("%Y-%m-%d %H:%M", time.gmtime(info.started)),
                    info.status,
                    str(info.target.model or "?"),
                    target,
                    len(info.levels_done),
                    _answer(info.sweep, summary),
                ),
            )
        )
    return [line for _, line in sorted(out, key=lambda x: -x[0])]


def _answer(sweep: SweepInfo, summary: dict) -> str:
    capacity = answer_in(sweep)
    if capacity is not None and capacity.headline:
        return capacity.headline
    if not summary:
        return "no summary (interrupted before a level ended?)"
    best = summary.get("best_level_within_slo")
    return f"within the SLO up to {best}" if best else "no level within the SLO"


def runs(
    folder: Path = typer.Argument(Path("runs"), help="The folder that holds run directories (default ./runs)."),
    json_out: bool = typer.Option(False, "--json", help="Print the list as JSON instead of a table."),
) -> None:
    """List the run directories under a folder, newest first: when, model, target, levels, status, answer."""
    lines = run_lines(folder)
    if json_out:
        print(json.dumps([asdict(x) for x in lines], indent=1))
        return
    if not lines:
        console.print(f"no run directories under {folder}", highlight=False)
        return
    # A table where one fits with every id, date and URL whole; else a block per run (reports/grid.py).
    t = Grid(
        f"runs under {folder}",
        [
            Column("run", wrap=False),
            Column("started (UTC)", wrap=False),
            Column("status", wrap=False),
            Column("model", wrap=False),
            Column("target", wrap=False),
            Column("levels", "right"),
            Column("answer"),
        ],
    )
    for x in lines:
        t.add_row(x.run_id, x.started, x.status, x.model, x.target, str(x.levels), x.answer)
    print_grid(console, t)
