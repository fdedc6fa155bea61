"""Predicted beside measured, per level: the terminal's grid (reports/grid.py), the HTML report's rows,
and the lines printed under the sweep's summary (the profile's scope once, then each finding)."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from analyzers.plan.departures import MetricCheck, PredictionCheck
from reports.grid import Column, Grid, print_grid, print_hanging
from reports.prediction_words import (
    METRIC_NAMES,
    band_caption,
    departure_sentences,
    departure_text,
    load_words,
    offline_line,
    scope_line,
    unpredicted_line,
    value_text,
)
from rundir.prediction import PREDICTED_METRICS

# The HTML table: one column per metric and side (predicted, measured, departure).
HTML_HEADER = ["level", "load"] + [
    f"{METRIC_NAMES[k]}{'' if k == 'output_tok_s' else ' ms'} {side}"
    for k in PREDICTED_METRICS
    for side in ("predicted", "measured", "departure")
]


def _cell(c: MetricCheck) -> str:
    text = f"{value_text(c.metric, c.predicted)} / {value_text(c.metric, c.measured)}"
    return text + (f" ({departure_text(c.departure)}{'!' if c.beyond else ''})" if c.departure is not None else "")


def prediction_grid(check: PredictionCheck) -> list[Grid]:
    """One row per level: each metric as 'predicted / measured (departure)', '!' beyond the band; a
    narrower layout puts the departure under the two values."""
    return [_layout(check, compact=False), _layout(check, compact=True)]


def _layout(check: PredictionCheck, compact: bool) -> Grid:
    columns = (
        [Column("level"), Column("load", "right")]
        + [Column(METRIC_NAMES[k].replace(" ", "\n", 1) + " ms", "right") for k in PREDICTED_METRICS[:-1]]
        + [Column("output\ntok/s", "right")]
    )
    grid = Grid(
        f'predicted / measured (departure), profile "{check.profile_name}"',
        columns,
        dense=compact,
        box_optional=True,
        caption=band_caption() + " ! = beyond the band.",
    )
    for lv in check.levels:
        load = load_words(lv.concurrency, lv.request_rate)
        cells: list[str | Text] = [lv.level_id, load.removeprefix("concurrency ") if compact else load]
        for k in PREDICTED_METRICS:
            c = lv.check(k)
            text = _cell(c).replace(" (", "\n(") if compact else _cell(c)
            cells.append(Text(text, style="red" if c.beyond and check.scope != "other_machine" else ""))
        grid.add_row(*cells)
    return grid


def html_rows(check: PredictionCheck) -> list[list[str]]:
    rows = []
    for lv in check.levels:
        row = [lv.level_id, load_words(lv.concurrency, lv.request_rate)]
        for k in PREDICTED_METRICS:
            c = lv.check(k)
            row += [
                value_text(k, c.predicted),
                value_text(k, c.measured),
                departure_text(c.departure) + (" !" if c.beyond else ""),
            ]
        rows.append(row)
    return rows


def prediction_lines(check: PredictionCheck) -> list[str]:
    """Each finding (or that there is none), the likely cause of a calibrated-only profile's, and
    the levels without a prediction."""
    lines = []
    findings = departure_sentences(check)
    if findings:
        lines += [f"Finding: {s}" for s in findings]
    elif check.scope != "other_machine":
        lines.append("Every level is within the model's error band of its prediction.")
    more = [offline_line(check), unpredicted_line(check)]
    return lines + [x for x in more if x]


def print_prediction(console: Console, check: PredictionCheck | None) -> None:
    """The grid and its lines under the sweep's summary (nothing when the run has no prediction)."""
    if check is None or not check.levels:
        return
    print_hanging(console, Text(scope_line(check)), indent=0, hang=2)
    print_grid(console, prediction_grid(check))
    for line in prediction_lines(check):
        style = "red" if line.startswith("Finding:") else ""
        print_hanging(console, Text(line, style=style), indent=0, hang=2)
