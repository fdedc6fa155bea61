"""--profile, declared once for the commands that hold a run against a machine profile's prediction
(`llmbench sweep`, `llmbench report`): the same flag means the same thing, with the same help."""

from __future__ import annotations

import typer

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
