"""`llmbench report` and `llmbench compare`: shareable files from run directories."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from llmbench.cli_common import err_console, make_console, user_errors
from llmbench.options import profile as profile_options
from rundir.errors import RunDirError

console = make_console()


@contextlib.contextmanager
def run_errors():
    """A missing or malformed run directory is the user's mistake: one line, exit 2, no traceback."""
    try:
        yield
    except FileNotFoundError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(code=2) from None
    except RunDirError as exc:
        err_console.print(f"[bold red]error:[/] malformed run directory: {escape(str(exc))}", highlight=False)
        raise typer.Exit(code=2) from None
    except (json.JSONDecodeError, TypeError, KeyError) as exc:
        err_console.print(
            f"[bold red]error:[/] malformed run directory ({type(exc).__name__}: {escape(str(exc))})", highlight=False
        )
        raise typer.Exit(code=2) from None


def _slos(run_slos: dict, ttft: float | None, tpot: float | None, e2e: float | None) -> dict:
    overrides = {k: v for k, v in {"ttft_p99_s": ttft, "tpot_p95_s": tpot, "e2e_p99_s": e2e}.items() if v is not None}
    if overrides:  # an SLO given here is the user's, not the default any more
        overrides["default"] = False
    return {**run_slos, **overrides}


def _rundir(path: Path):
    from rundir import RunDir

    run = RunDir(path)
    if not run.exists():
        raise FileNotFoundError(f"{path} is not a run directory (no run.json)")
    return run


def report(
    run_dirs: list[Path] = typer.Argument(
        ...,
        metavar="RUN_DIR...",
        help="A run directory written by `llmbench "
        "sweep` (complete or interrupted); with --runs, several (or folders of "
        "them, as `llmbench runs` lists).",
    ),
    runs: bool = typer.Option(
        False,
        "--runs",
        help="Plot the runs together in one runs.html: each run's "
        "throughput-latency curve and the per-user vs per-replica throughput frontier.",
    ),
    out: Optional[Path] = typer.Option(None, help="--runs: the folder for runs.html (default: the current directory)."),
    open_: bool = typer.Option(False, "--open", help="Open the HTML in the default browser when done."),
    slo_ttft: Optional[float] = typer.Option(None, help="SLO: TTFT P99 in seconds (default: the run's, 1.5)."),
    slo_tpot: Optional[float] = typer.Option(None, help="SLO: TPOT P95 in seconds (default: the run's, 0.050)."),
    slo_e2e: Optional[float] = typer.Option(None, help="SLO: E2E P99 in seconds (default: the run's, none)."),
    profile: Optional[str] = profile_options.PROFILE,
) -> None:
    """Write report.html (self-contained), report.md, summary.csv and summary.json into a run directory
    and print the summary table; with --runs, one runs.html that plots several runs together. With
    --profile, first predict every level from the profile into prediction.json (a run that has one
    shows it without --profile)."""
    from reports.answer import build_answer
    from reports.grid import print_grid
    from reports.prediction_table import print_prediction
    from reports.terminal import print_answer, run_summary_table
    from reports.write import read_diagnosis, write_reports

    if runs:
        if any(v is not None for v in (slo_ttft, slo_tpot, slo_e2e)):
            raise typer.BadParameter(
                "each run is judged by its own SLO in runs.html; re-judge one with "
                "`llmbench report RUN --slo-ttft ...` first",
                param_hint="--runs",
            )
        if profile is not None:
            raise typer.BadParameter(
                "predict one run at a time: `llmbench report RUN --profile FILE`", param_hint="--profile"
            )
        _report_runs(run_dirs, out or Path("."), open_)
        return
    if len(run_dirs) != 1 or out is not None:
        raise typer.BadParameter(
            "one run directory makes a report; plot several together with --runs "
            "(--out is its folder), or compare two with `llmbench compare`"
        )
    run_dir = run_dirs[0]
    with user_errors(), run_errors():
        run = _rundir(run_dir)
        t0 = time.perf_counter()
        if profile is not None:
            from llmbench.prediction import check_profile_option, predict_into

            check_profile_option(profile)
            record = predict_into(run, profile)
            console.print(
                f"predicted {len(record.levels)} levels from the profile {record.profile.name} into "
                f"{run.prediction_json}",
                highlight=False,
                markup=False,
            )
        summary, paths = write_reports(run, _slos(run.read_info().slos.to_dict(), slo_ttft, slo_tpot, slo_e2e))
    for warning in (f for f in summary.findings if f.startswith(str(run.requests_jsonl))):
        err_console.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    print_grid(console, run_summary_table(summary, title=f"run {summary.info.run_id} ({summary.info.status})"))
    print_prediction(console, summary.prediction)
    print_answer(console, build_answer(summary, read_diagnosis(run)))
    console.print(f"wrote {paths['html']}, report.md, summary.csv, summary.json in {time.perf_counter() - t0:.1f} s")
    if open_:
        import webbrowser

        webbrowser.open(paths["html"].resolve().as_uri())


def run_dirs_of(paths: list[Path]) -> list:
    """Run directories, each path one or a folder of them (its run directories, by name)."""
    from rundir import RunDir

    out = []
    for p in paths:
        if RunDir(p).exists():
            out.append(RunDir(p))
            continue
        inside = sorted(q for q in p.iterdir() if RunDir(q).exists()) if p.is_dir() else []
        if not inside:
            raise FileNotFoundError(f"{p} is not a run directory (no run.json) nor a folder of them")
        out += [RunDir(q) for q in inside]
    return out


def _report_runs(paths: list[Path], out: Path, open_: bool) -> None:
    from reports.write import write_runs_report

    with user_errors(), run_errors():
        t0 = time.perf_counter()
        dirs = run_dirs_of(paths)
        curves, html = write_runs_report(dirs, out)
    for c in curves:
        peak = max(c.plotted, key=lambda p: p.output_tok_s, default=None)
        if peak is None:
            console.print(
                f"{c.label}: no level is a measurement (see its report); not plotted", highlight=False, markup=False
            )
            continue
        per_user = "—" if peak.per_user_tok_s is None else f"{peak.per_user_tok_s:,.1f}"
        console.print(
            f"{c.label}: {len(c.points)} level{'s' * (len(c.points) != 1)}, peak "
            f"{peak.per_replica_tok_s:,.1f} output tok/s per replica at {per_user} tok/s per user "
            f"({peak.level_id})",
            highlight=False,
            markup=False,
        )
    plotted = {c.path for c in curves}
    for d in dirs:
        if str(d.path) not in plotted:
            err_console.print(
                f"[yellow]warning:[/] {escape(str(d.path))}: no level with a successful request in its "
                "window; not plotted",
                highlight=False,
            )
    console.print(f"wrote {html} ({len(dirs)} runs) in {time.perf_counter() - t0:.1f} s", highlight=False)
    if open_:
        import webbrowser

        webbrowser.open(html.resolve().as_uri())


def compare(
    runs: list[Path] = typer.Argument(..., help="Two or more run directories; each is compared with the first (A)."),
    out: Optional[Path] = typer.Option(
        None, help="Folder for compare.html and compare.md (default: the current directory)."
    ),
    min_effect: float = typer.Option(
        0.02,
        help="Changes smaller than this fraction of A's value are 'within noise' even when the interval excludes zero.",
    ),
    slo_ttft: Optional[float] = typer.Option(None, help="SLO: TTFT P99 in seconds for goodput (default: each run's)."),
    slo_tpot: Optional[float] = typer.Option(None, help="SLO: TPOT P95 in seconds for goodput (default: each run's)."),
    slo_e2e: Optional[float] = typer.Option(None, help="SLO: E2E P99 in seconds for goodput (default: none)."),
    fail_on_regression: Optional[str] = typer.Option(
        None,
        help="Exit 1 when output tok/s, TTFT P99 or TPOT P95 got worse by more than this (5% or 0.05) at "
        "any shared level, the change significant by the comparison's 95% intervals; prints a one-line reason.",
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print the comparison (and the gate's result) as JSON on stdout; the tables go to stderr."
    ),
    junit: Optional[Path] = typer.Option(
        None,
        help="Write the gate as JUnit XML (a testcase per level and gated "
        "metric, a regression a failure) for CI test reports.",
    ),
    github_summary: bool = typer.Option(
        False, help="Append the gate's verdict as Markdown to $GITHUB_STEP_SUMMARY (GitHub Actions)."
    ),
) -> None:
    """Compare runs level by level (A/B before an upgrade or a tuning change): deltas with bootstrap
    confidence intervals and a verdict per metric (better / worse / within noise); with
    --fail-on-regression, a CI gate."""
    from analyzers.regression import parse_tolerance, regression_gate
    from reports.gate_output import gate_line, junit_xml, step_summary
    from reports.write import write_compare

    if len(runs) < 2:
        raise typer.BadParameter("give at least two run directories")
    try:
        tolerance = parse_tolerance(fail_on_regression) if fail_on_regression is not None else None
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--fail-on-regression") from None
    if github_summary and not os.environ.get("GITHUB_STEP_SUMMARY"):
        raise typer.BadParameter(
            "$GITHUB_STEP_SUMMARY is not set (it is, inside a GitHub Actions step)", param_hint="--github-summary"
        )
    out_console = make_console(stderr=True) if json_out else console
    with user_errors(), run_errors():
        dirs = [_rundir(p) for p in runs]
        overrides = _slos({}, slo_ttft, slo_tpot, slo_e2e) or None
        slos = None if overrides is None else {**dirs[0].read_info().slos.to_dict(), **overrides}
        comparisons, paths = write_compare(dirs, out or Path("."), slos, min_effect)
    _print_comparisons(out_console, comparisons, min_effect)
    out_console.print(f"wrote {paths['html']} and {paths['md']}")
    gate = regression_gate(comparisons, tolerance if tolerance is not None else 0.0)
    if junit is not None:
        junit.write_text(junit_xml(comparisons, gate), encoding="utf-8")
    if github_summary:
        with open(os.environ["GITHUB_STEP_SUMMARY"], "a", encoding="utf-8") as f:
            f.write(step_summary(comparisons, gate))
    if json_out:
        doc: dict[str, object] = {"comparisons": [dataclasses.asdict(c) for c in comparisons]}
        if tolerance is not None:
            doc["gate"] = dataclasses.asdict(gate) | {"failed": gate.failed, "reason": gate_line(gate)}
        print(json.dumps(_finite(doc), indent=1))
    if tolerance is not None:
        (err_console if json_out else console).print(gate_line(gate), highlight=False, markup=False)
        if gate.failed:
            raise typer.Exit(code=1)


def _finite(obj):
    """JSON has no infinity: an unbounded percentile (it reached failed requests) is null, its note says why."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _print_comparisons(console, comparisons, min_effect: float) -> None:
    from reports.compare_answer import compare_answer
    from reports.grid import print_grid
    from reports.terminal import compare_table, print_answer

    for c in comparisons:
        print_grid(console, compare_table(c))
        n = c.counts()
        console.print(
            f"B vs A: [green]{n['better']} better[/], [red]{n['worse']} worse[/], "
            f"{n['within noise']} within noise (95% bootstrap intervals; changes under "
            f"{min_effect:.0%} count as noise)"
        )
        print_answer(console, compare_answer(c))
        if c.only_a or c.only_b:
            console.print(
                f"skipped levels: only in A: {', '.join(c.only_a) or '—'}; only in B: {', '.join(c.only_b) or '—'}",
                markup=False,
            )
        if not c.levels:
            console.print("[yellow]the runs share no level: nothing to compare[/]")
