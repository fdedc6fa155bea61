"""A marked playbook (playbooks.playbook.PlaybookRun) as the terminal shows it: a table grouped by
section, or, on a terminal too narrow for one, a block per step (reports/grid.py)."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from playbooks.playbook import PlaybookRun, Status
from reports.grid import Column, Grid, print_grid

STATUS_STYLE = {Status.PASSED: "green", Status.FAILED: "bold red", Status.UNCHECKED: "yellow", Status.MANUAL: "cyan"}


def playbook_grid(run: PlaybookRun) -> Grid:
    grid = Grid(
        f"playbook {run.playbook.name}: {run.playbook.title}",
        [
            Column("section", group=True),
            Column("step", wrap=False),
            Column("check"),
            Column("status"),
            Column("evidence"),
        ],
    )
    for r in run.results():
        grid.add_row(
            r.step.section, r.step.id, r.step.title, Text(r.status.value, style=STATUS_STYLE[r.status]), r.evidence
        )
    return grid


def print_playbook(run: PlaybookRun, console: Console) -> None:
    """The steps in playbook order, then the count of each status."""
    print_grid(console, playbook_grid(run))
    c = run.counts()
    console.print(
        f"[dim]{c['passed']} passed, {c['failed']} failed, {c['could not be checked']} could not be "
        f"checked, {c['manual']} manual (see playbooks/{run.playbook.name}.md)[/]"
    )
