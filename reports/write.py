"""Write a run's shareable files: summary.json, summary.csv, report.md and report.html; and the
compare report. Everything is recomputed from the run directory, so this works on any run,
complete or interrupted, and the sweep calls the same function at its end."""

from __future__ import annotations

from pathlib import Path

from analyzers.compare import MIN_EFFECT, Comparison, compare_runs
from analyzers.probe_series import read_probes
from analyzers.stats.slo import Slos
from analyzers.summary import RunSummary, analyze_run
from rundir import RunDir, files
from rundir.atomic import atomic_write

_write = atomic_write  # a reader never sees half a report


def write_reports(run: RunDir, slos: "Slos | dict | None" = None) -> tuple[RunSummary, dict[str, Path]]:
    from reports.html import render_report  # matplotlib is imported only when a report is drawn
    from reports.markdown import render_report_md
    from reports.tables import csv_frame

    summary, table = analyze_run(run, slos)
    run.write_summary(summary.to_dict())
    paths = {"json": run.summary_json, "csv": run.summary_csv, "md": run.report_md, "html": run.report_html}
    _write(paths["csv"], csv_frame(summary).to_csv(index=False))
    diagnosis = read_diagnosis(run)
    _write(paths["md"], render_report_md(summary, diagnosis))
    _write(paths["html"], render_report(summary, table, read_probes(run), diagnosis))
    return summary, paths


def read_diagnosis(run: RunDir) -> dict | None:
    """`llmdiag p99`'s diagnosis_p99.json, when the run has been diagnosed (a torn file is ignored)."""
    import json

    path = run.diagnosis_p99_json
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):
        return None


def write_compare(
    runs: list[RunDir], out_dir: Path, slos: "Slos | dict | None" = None, min_effect: float = MIN_EFFECT
) -> tuple[list[Comparison], dict[str, Path]]:
    """Compare every run after the first against the first (the baseline)."""
    from reports.html import render_compare
    from reports.markdown import render_compare_md

    analyzed = [analyze_run(r, slos) for r in runs]
    comparisons = [compare_runs(analyzed[0], other, min_effect=min_effect) for other in analyzed[1:]]
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"md": out_dir / files.COMPARE_MD, "html": out_dir / files.COMPARE_HTML}
    _write(paths["md"], render_compare_md(comparisons, min_effect))
    _write(paths["html"], render_compare(comparisons, [s for s, _ in analyzed], min_effect))
    return comparisons, paths


def write_runs_report(runs: list[RunDir], out_dir: Path) -> tuple[list, Path]:
    """runs.html in out_dir: every run's curves (analyzers.run_curves), each judged by its own SLO.
    Returns the curves and the file's path."""
    from analyzers.run_curves import curves_of
    from reports.runs_report import render_runs

    curves, skipped = [], []
    for run in runs:
        own = curves_of(analyze_run(run)[0], str(run.path))
        curves += own
        if not own:
            skipped.append(run.path.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / files.RUNS_HTML
    _write(path, render_runs(curves, len(runs), skipped))
    return curves, path
