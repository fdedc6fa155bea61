"""--profile, declared once for the commands that hold a run against a machine profile's prediction
(`llmbench sweep`, `llmbench report`): the same flag means the same thing, with the same help; and
how many simulations a prediction pools per level, for every command that predicts."""

from __future__ import annotations

import typer

# A closed loop's users settle into a phase (which requests prefill beside which) that the request
# overheads' and the steps' random draws decide, and one simulation is one such phase. `--seeds N`
# pools N of them per level. One by default: pooling three moved the plan bench's held-out errors by
# at most 3.5 points either way, some better and some worse (bench/RESULTS.md, "Seeds pooled"): its
# misses are the model's biases, not the draws', and three seeds cost three simulations.
POOLED_SEEDS = 1  # `llmdiag plan --seeds`' default, and every other prediction's

PROFILE = typer.Option(
    None,
    "--profile",
    metavar="FILE|GPU",
    help="A machine profile: `llmdiag calibrate --out FILE` (this machine), a fitted one (`llmdiag plan "
    "--predict-sweep RUN --fit ... --save-profile FILE`), or a published GPU (h100, h200, a100, mi300x). Each "
    "level is also predicted from it (docs/planning.md) into the run's prediction.json, and the report shows "
    "predicted beside measured (TTFT P50/P99, TPOT P50/P95, output tok/s) with a finding for a level that "
    "departs from its prediction by more than the model's error band (the report's caption says it; "
    "docs/planning.md, 'In the sweep's report', says where it comes from). For the "
    "embedded engine the prediction checks the run only when the profile was measured on this machine; for an "
    "external target the profile is an assumption about the hardware serving it.",
)
