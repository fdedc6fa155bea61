"""`llmdiag p99`: why P99 is bad, from a run directory: network, then scheduling, then host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.text import Text

from llmbench.cli_common import err_console, make_console, user_errors
from rundir import RunDir

console = make_console()


def p99(
    run: Optional[Path] = typer.Argument(
        None,
        help="A run directory written by `llmbench sweep` (with --live: "
        "where to write the observation, default ./runs/<timestamp>-p99-live).",
    ),
    metric: str = typer.Option("ttft", help="Which tail to explain: ttft, tpot or e2e."),
    live: bool = typer.Option(
        False,
        help="Observe a running server first: a light closed-loop load with every "
        "probe that can run here, for --duration, then diagnose that run.",
    ),
    target: Optional[str] = typer.Option(None, help="--live: base URL of the server (loopback or your own hosts)."),
    model: Optional[str] = typer.Option(
        None, help="--live: the model name the server serves (default: the one its /v1/models lists)."
    ),
    duration: str = typer.Option("60s", help="--live: how long to observe, e.g. 60s or 5m."),
    concurrency: int = typer.Option(2, min=1, help="--live: concurrent requests of the light load."),
    input_len: int = typer.Option(128, min=1, help="--live: prompt tokens of the light load."),
    output_len: int = typer.Option(32, min=1, help="--live: output tokens of the light load."),
    tokenizer: Optional[Path] = typer.Option(
        None,
        help="--live: tokenizer.json (or its directory) of the served "
        "model, for exact prompt sizing (without it the server's own count sizes them).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the diagnosis as JSON instead of tables."),
    save: bool = typer.Option(True, help="Also write diagnosis_p99.json into the run directory (the report shows it)."),
) -> None:
    """Why P99 is bad: finds the spike windows and the standing tails (levels slow throughout, split into
    queue, prefill and decode), checks the network, then scheduling, then the host with the target's own
    evidence, ranks the causes by the share of the tail they explain and marks the p99 playbook."""
    from analyzers.triage.p99 import diagnose_p99, diagnosis_record, mark_playbook, save_diagnosis
    from reports.playbook_table import print_playbook
    from rundir import RunDir

    with user_errors():
        if live:
            run = _observe(run, target, model, duration, concurrency, input_len, output_len, tokenizer)
        elif run is None:
            from analyzers.diagnosis_error import DiagnosisError

            raise DiagnosisError("give a run directory, or --live --target URL")
        diag = diagnose_p99(RunDir(run), metric)
    data = diagnosis_record(diag)
    if save:
        save_diagnosis(RunDir(run), data)
        _refresh_report(run, quiet=json_out)
    if json_out:
        typer.echo(json.dumps(data, indent=1, default=str))
        return
    _print_tail(diag)
    _print_findings(diag, data)
    print_playbook(mark_playbook(diag), console)


def _observe(out: Path | None, target, model, duration, concurrency, input_len, output_len, tokenizer) -> Path:
    """Run a one-level sweep with the default probes against the live target; return its run directory."""
    from analyzers.diagnosis_error import DiagnosisError
    from llmbench.sweep.run import default_run_dir

    if not target:
        raise DiagnosisError("--live needs --target URL")
    out = out or default_run_dir("p99-live")
    cmd = [
        sys.executable,
        "-m",
        "llmbench.cli",
        "sweep",
        "--target",
        target,
        *(["--model", model] if model else []),
        "--concurrency",
        str(concurrency),
        "--input-len",
        str(input_len),
        "--output-len",
        str(output_len),
        "--warmup",
        "2s",
        "--duration",
        duration,
        "--out",
        str(out),
    ]
    if tokenizer:
        cmd += ["--tokenizer", str(tokenizer)]
    console.print(f"observing {target} for {duration} (concurrency {concurrency}) into {out}")
    rc = subprocess.call(cmd)
    if rc != 0 or not RunDir(out).exists():
        raise DiagnosisError(f"the observation run failed (exit {rc}); see the messages above")
    return out


def _refresh_report(run: Path, quiet: bool = False) -> None:
    """Re-render the run's report so that it shows this diagnosis (best effort: the diagnosis stands alone)."""
    from reports.write import write_reports
    from rundir import RunDir

    try:
        _, paths = write_reports(RunDir(run))
    except Exception as exc:  # noqa: BLE001 - a report that cannot be drawn must not hide the diagnosis above
        err_console.print(f"[yellow]report not refreshed: {type(exc).__name__}: {exc}[/]")
        return
    if not quiet:  # --json keeps stdout pure JSON
        console.print(f"report with the diagnosis: {paths['html']}")


def _print_tail(diag) -> None:
    from reports.grid import Column, Grid, print_grid

    t = diag.tails
    grid = Grid(
        f"{diag.metric.upper()} tail of run {diag.run_id}",
        [Column("level", wrap=False)]
        + [Column(c, "right") for c in ("requests", "P50 ms", "P99 ms", "spike above ms", "spikes")],
    )
    for lv in t.levels:
        grid.add_row(
            lv.level_id,
            str(lv.n),
            f"{1e3 * lv.p50:.0f}",
            f"{1e3 * lv.p99:.0f}",
            f"{1e3 * lv.threshold:.0f}",
            str(lv.n_spikes),
        )
    print_grid(console, grid)
    console.print(f"{len(t.spikes)} spike window(s) covering {t.spike_s:.1f} s of the {t.span.seconds:.1f} s measured")


def _print_findings(diag, data: dict) -> None:
    """The causes ranked, then each one's evidence in a few sentences (every number: the report)."""
    from reports.evidence_words.sentences import evidence_sentences
    from reports.grid import Column, Grid, print_grid, print_hanging

    standing = [lv for lv in diag.levels if lv.standing]
    if standing:
        console.print(Text("standing tails: " + "; ".join(f"{lv.level_id} ({lv.why})" for lv in standing)))
    if not diag.findings:
        console.print(Text(diag.headline, style="green"))
    else:
        grid = Grid(
            f"Findings, most likely cause first ({diag.tail_requests} tail requests)",
            [
                Column("#", "right"),
                Column("category", wrap=False),
                Column("severity", wrap=False),
                Column("finding"),
                Column("share of the tail"),
                Column("next step"),
            ],
        )
        for i, f in enumerate(diag.findings, 1):
            grid.add_row(str(i), f.category, f.severity, f.title, f"{f.coverage:.0%} ({f.kind})", f.next_step)
        print_grid(console, grid)
        for i, f in enumerate(data["findings"], 1):
            console.print(Text(f"Evidence for #{i}:", style="bold"))
            for line in evidence_sentences(f, diag.metric)[:-1]:  # the next step is in the table
                print_hanging(console, Text(f"· {line}"), indent=2)
    for f in diag.context:
        console.print(Text(f"context ({f.coverage:.0%} of the tail): {f.title}", style="dim"))
    for note in diag.notes:
        console.print(Text(f"note: {note}", style="dim"))
