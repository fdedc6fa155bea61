"""`llmdiag p99`: why P99 is bad, from a run directory: network, then scheduling, then host."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from llmbench.cli_common import user_errors

console = Console()


def p99(
    run: Path = typer.Argument(..., help="A run directory written by `llmbench sweep` or `llmdiag probe`."),
    metric: str = typer.Option("ttft", help="Which tail to explain: ttft, tpot or e2e."),
    json_out: bool = typer.Option(False, "--json", help="Print the diagnosis as JSON instead of tables."),
    save: bool = typer.Option(True, help="Also write diagnosis_p99.json into the run directory (the report shows it)."),
) -> None:
    """Why P99 is bad: finds the spike windows of the tail, checks the network, then scheduling, then the
    host for evidence that coincides with them, ranks the causes and marks the p99 playbook."""
    from analyzers.p99_triage import diagnose_p99, mark_playbook
    from llmbench.rundir import RunDir
    from playbooks.playbook import render

    with user_errors():
        diag = diagnose_p99(RunDir(run), metric)
        playbook = mark_playbook(diag)
    data = diag.to_dict() | {"playbook": playbook.to_dict()}
    if save:
        (run / "diagnosis_p99.json").write_text(json.dumps(data, indent=1, default=str))
    if json_out:
        typer.echo(json.dumps(data, indent=1, default=str))
        return
    _print_tail(diag)
    _print_findings(diag)
    render(playbook, console)


def _print_tail(diag) -> None:
    t = diag.tails
    table = Table(title=f"{diag.metric.upper()} tail of run {diag.run_id}", title_justify="left")
    for col in ("level", "requests", "P50 ms", "P99 ms", "spike above ms", "spikes"):
        table.add_column(col, justify="right" if col != "level" else "left")
    for lv in t.levels:
        table.add_row(Text(lv.level_id), str(lv.n), f"{1e3 * lv.p50:.0f}", f"{1e3 * lv.p99:.0f}",
                      f"{1e3 * lv.threshold:.0f}", str(lv.n_spikes))
    console.print(table)
    console.print(f"{len(t.spikes)} spike window(s) covering {t.spike_s:.1f} s of the {t.span.seconds:.1f} s measured")


def _print_findings(diag) -> None:
    if not diag.findings:
        console.print(f"[green]{diag.headline}[/]", highlight=False)
        return
    table = Table(title="Findings, most likely cause first", title_justify="left", show_lines=True)
    for col in ("#", "category", "severity", "finding", "spike windows explained", "next step"):
        table.add_column(col, overflow="fold")
    for i, f in enumerate(diag.findings, 1):
        table.add_row(str(i), f.category, f.severity, Text(f.title), f"{len(f.explains)}/{f.spike_windows}",
                      Text(f.next_step))
    console.print(table)
