"""An existing run's levels predicted from its own specification, beside what it measured.

The engine is the run's (run.json's engine flags, its recorded KV blocks), the levels are its
sweep's, the model its model. Levels named for fitting calibrate the profile to the run
(analyzers/plan/fit/); every other level is a prediction, reported apart from the fitted ones.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Iterator
from dataclasses import astuple, dataclass, field

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.presets import ModelShape
from analyzers.plan.engine_config import EngineSetup
from analyzers.plan.fit import FitResult, fit_profile
from analyzers.plan.outside_server import OutsideTime
from analyzers.plan.predict import (
    METRICS,
    LevelLoad,
    LevelPrediction,
    predict_level,
    relative_errors,
)
from analyzers.plan.profile import MachineProfile
from analyzers.plan.simulate import LengthsFn, Simulator
from analyzers.plan.step_jitter import StepJitter
from analyzers.plan.step_model import StepModel

# A fit that misses its own levels by more than this (median |error| of TPOT P50 or throughput) has
# not found a profile that describes the run: its predictions of other levels are not to be trusted
# (bench/RESULTS.md: a PP2 fit off by +97% on a fitted level predicted a held-out one +544%).
FIT_TRUSTED = 0.25
FIT_CHECKED = ("tpot_p50_s", "output_tok_s")


def fit_warning(error_summary: dict[str, dict[str, float | None]]) -> str | None:
    """One line when the fitted levels' own errors say the fit failed; None otherwise or without a fit."""
    fitted = error_summary.get("fitted") or {}
    worst = max(((k, v) for k in FIT_CHECKED if (v := fitted.get(k)) is not None), key=lambda kv: kv[1], default=None)
    if worst is None or worst[1] <= FIT_TRUSTED:
        return None
    name = {"tpot_p50_s": "TPOT P50", "output_tok_s": "output tok/s"}[worst[0]]
    return (
        f"the fit misses its own levels ({name} by a median {worst[1]:.0%}, over {FIT_TRUSTED:.0%}): no profile "
        "of this model describes the run, so its predictions of the other levels are not to be trusted"
    )


@dataclass
class LevelInput:
    load: LevelLoad
    lengths: LengthsFn
    arrivals: Callable[[], Iterator[float] | None]


@dataclass
class SweepPrediction:
    run_id: str
    model: str
    profile: MachineProfile
    setup: EngineSetup
    rows: list[dict]
    fit: FitResult | None = None
    error_summary: dict[str, dict[str, float | None]] = field(default_factory=dict)
    seeds: int = 1  # simulations pooled per level

    def to_dict(self) -> dict:
        ov = self.profile.step_overhead
        return {
            "run_id": self.run_id,
            "model": self.model,
            "profile": {
                "name": self.profile.name,
                "source": self.profile.source,
                "assumptions": self.profile.assumptions,
                "step_overhead_s": [ov.fixed_s, ov.per_unit_s],
                # fixed, per running request, per prompt token (analyzers/plan/request_overhead.py)
                "request_overhead_s": list(astuple(self.profile.request_overhead)),
                "compute_scale": self.profile.compute_scale,
                "contended_share": self.profile.contended_share,
                "step_jitter": None if self.profile.step_jitter is None else self.profile.step_jitter.to_dict(),
            },
            "engine": {
                "tp": self.setup.tp,
                "pp": self.setup.pp,
                "batches_in_flight": self.setup.batches_in_flight,
                "max_num_seqs": self.setup.scheduler.max_num_seqs,
                "max_num_batched_tokens": self.setup.scheduler.max_num_batched_tokens,
                "enable_chunked_prefill": self.setup.scheduler.enable_chunked_prefill,
                "kv_blocks": self.setup.cache.num_blocks,
                "block_size": self.setup.cache.block_size,
                "notes": list(self.setup.notes),
            },
            "fit": None
            if self.fit is None
            else {
                "levels": self.fit.fitted_levels,
                "step_overhead_before_s": [
                    self.fit.step_overhead_before.fixed_s,
                    self.fit.step_overhead_before.per_unit_s,
                ],
                "request_overhead_before_s": list(astuple(self.fit.request_overhead_before)),
                "request_overhead_from": self.fit.request_overhead_from,
                "warning": fit_warning(self.error_summary),
            },
            "seeds": self.seeds,
            "levels": self.rows,
            "median_abs_error": self.error_summary,
        }


def _predict_all(
    shape: ModelShape, setup: EngineSetup, levels: list[LevelInput], seeds: int = 1
) -> Callable[[MachineProfile], list[LevelPrediction]]:
    def run(profile: MachineProfile) -> list[LevelPrediction]:
        sim = Simulator(
            StepModel(shape, profile, setup.tp, setup.pp),
            setup.scheduler,
            setup.cache,
            profile.request_overhead,
            batches_in_flight=setup.batches_in_flight,
        )
        return [predict_level(sim, lv.load, lv.lengths, lv.arrivals, seeds) for lv in levels]

    return run


def _role(level_id: str, fit_levels: list[str] | None, measured: dict) -> str:
    if fit_levels and level_id in fit_levels:
        return "fitted"
    return "predicted" if level_id in measured else "not run"


def median_abs_errors(rows: list[dict], role: str) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for k in METRICS:
        errs = [abs(r["error"][k]) for r in rows if r["role"] == role and r["error"] and r["error"][k] is not None]
        out[k] = statistics.median(errs) if errs else None
    return out


def predict_sweep(
    run_id: str,
    shape: ModelShape,
    profile: MachineProfile,
    setup: EngineSetup,
    levels: list[LevelInput],
    measured: dict[str, dict],
    fit_levels: list[str] | None = None,
    fit_scale: bool = True,
    outside: dict[str, OutsideTime] | None = None,
    jitter: StepJitter | None = None,
    seeds: int = 1,
) -> SweepPrediction:
    """`outside`: the run's measured time outside the server per level (the fit draws the request
    overhead through the fitted levels' own). `jitter`: the run's own step-time wander, measured at a
    fitted concurrency-1 level; the fit and every prediction simulate with it. `seeds`: simulations
    pooled per predicted level (the fit's passes simulate one each: it moves factors by differences
    between passes, which one seed's fixed draws keep free of the draws' own noise)."""
    fit = None
    if fit_levels:
        unknown = sorted(set(fit_levels) - {lv.load.level_id for lv in levels})
        if unknown:
            raise DiagnosisError(
                f"--fit: no level {unknown[0]!r} in this run; its levels: "
                f"{', '.join(lv.load.level_id for lv in levels)}"
            )
        missing = [lid for lid in fit_levels if lid not in measured]
        if missing:
            raise DiagnosisError(f"--fit: level {missing[0]!r} has no measurement in this run")
        fit_inputs = [lv for lv in levels if lv.load.level_id in fit_levels]
        fit = fit_profile(
            profile,
            _predict_all(shape, setup, fit_inputs),
            {lid: measured[lid] for lid in fit_levels},
            run_id,
            fit_scale=fit_scale,
            outside=[o for lid, o in (outside or {}).items() if lid in fit_levels],
        )
        profile = fit.profile
        if jitter is not None:
            # Said before the fit's own line, which stays last (what the fit found, read by the table).
            said = [*profile.assumptions[:-1], jitter.describe(), *profile.assumptions[-1:]]
            profile = dataclasses.replace(profile, step_jitter=jitter, assumptions=said)
    rows = []
    for pred in _predict_all(shape, setup, levels, seeds)(profile):
        meas = measured.get(pred.level_id)
        rows.append(
            {
                "level_id": pred.level_id,
                "role": _role(pred.level_id, fit_levels, measured),
                "predicted": {
                    **pred.metrics(),
                    "req_s": pred.req_s,
                    "mean_batch": pred.mean_batch,
                    "preemptions": pred.preemptions,
                    "n_requests": pred.n_requests,
                    "notes": pred.notes,
                },
                "measured": meas,
                "error": relative_errors(pred.metrics(), meas) if meas else None,
            }
        )
    summary = {
        role: median_abs_errors(rows, role) for role in ("fitted", "predicted") if any(r["role"] == role for r in rows)
    }
    return SweepPrediction(run_id, shape.name, profile, setup, rows, fit, summary, seeds)
