"""--profile, declared once for the commands that hold a run against a machine profile's prediction
(`llmbench sweep`, `llmbench report`): the same flag means the same thing, with the same help; and
how many simulations a prediction pools per level, for every command that predicts."""

from __future__ import annotations

import typer

# A closed loop's users settle into a phase (which requests prefill beside which) that the request
# overheads' and the steps' random draws decide, and one simulation is one such phase: its TTFT and
# TPOT move with the seed, most where prefills are long beside many decodes (bench/RESULTS.md,
# bench/plan_accuracy.py's seeds). A served level is one phase too, but which one is not known in
# advance, so a prediction is of the level's distribution: this many seeds, their requests pooled.
POOLED_SEEDS = 3  # `llmdiag plan --seeds`' default, and every other prediction's

PROFILE = typer.Option(
    None,
    "--profile",
    metavar="FILE|GPU",
    help="A machine profile: `llmdiag calibrate --out FILE` (this machine), a fitted one (`llmdiag plan "
    "--predict-sweep RUN --fit ... --save-profile FILE`), or a published GPU (h100, h200, a100, mi300x). Each "
    "level is also predicted from it (docs/planning.md) into the run's prediction.json, and the report shows "
    "predicted beside measured (TTFT P50/P99, TPOT P50/P95, output tok/s) with a finding for a level whose TPOT "
    "P50 or throughput departs from its prediction by more than the model's error band (50%). For the "
    "embedded engine the prediction checks the run only when the profile was measured on this machine; for an "
    "external target the profile is an assumption about the hardware serving it.",
)
