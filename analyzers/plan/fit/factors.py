"""The factors a fit moves (how each is read, set and nudged), the bound on the request overhead, and
the simulated metrics each fitted level is held to."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from analyzers.plan.fit.gauss_newton import Factor
from analyzers.plan.predict import LevelPrediction
from analyzers.plan.profile import LinearCost, MachineProfile


def _put_step(profile: MachineProfile, fixed_s: float | None = None, per_unit_s: float | None = None) -> MachineProfile:
    ov = profile.step_overhead
    a = ov.fixed_s if fixed_s is None else fixed_s
    b = ov.per_unit_s if per_unit_s is None else per_unit_s
    return dataclasses.replace(profile, step_overhead=LinearCost(a, b, ov.lo, ov.hi))


STEP_FACTORS = (
    Factor(
        "compute_scale",
        lambda p: p.compute_scale,
        lambda p, v: dataclasses.replace(p, compute_scale=max(v, 0.01)),
        lambda v: 0.1 * v,
    ),
    Factor(
        "step overhead",
        lambda p: p.step_overhead.fixed_s,
        lambda p, v: _put_step(p, fixed_s=v),
        lambda v: max(2e-4, 0.25 * v),
    ),
    Factor(
        "step overhead per request",
        lambda p: p.step_overhead.per_unit_s,
        lambda p, v: _put_step(p, per_unit_s=v),
        lambda v: max(2e-5, 0.25 * v),
    ),
)
CONTENDED_FACTOR = Factor(
    "contended share",
    lambda p: p.contended_share,
    lambda p, v: dataclasses.replace(p, contended_share=min(max(v, 0.0), 1.0)),
    lambda v: 0.2 if v < 0.5 else -0.2,  # inside [0, 1] either way
)
REQUEST_FACTORS = (
    Factor(
        "request overhead",
        lambda p: p.request_overhead_s,
        lambda p, v: dataclasses.replace(p, request_overhead_s=v),
        lambda v: max(1e-3, 0.25 * v),
    ),
    Factor(
        "request overhead per running request",
        lambda p: p.request_overhead_per_running_s,
        lambda p, v: dataclasses.replace(p, request_overhead_per_running_s=v),
        lambda v: max(2e-4, 0.25 * v),
    ),
)


def request_overhead_bound(running: float, unloaded_ttft_s: float) -> Callable[[MachineProfile], MachineProfile]:
    """The request overhead at `running` requests (the most the fitted levels run) no longer than
    `unloaded_ttft_s`, the shortest TTFT P50 measured: HTTP and tokenization cannot take longer than
    a whole request's wait for its first token at the lightest load. Without it the fit can put a
    closed loop's queueing into the overhead: TTFT P50 barely moves with it while users stay in
    phase (docs/planning.md, "Lockstep"), and one fit reached 3.9 s per running request."""

    def bound(p: MachineProfile) -> MachineProfile:
        r0, r1 = p.request_overhead_s, p.request_overhead_per_running_s
        at_most = r0 + r1 * running
        if at_most <= unloaded_ttft_s or at_most <= 0:
            return p
        shrink = unloaded_ttft_s / at_most
        return dataclasses.replace(p, request_overhead_s=r0 * shrink, request_overhead_per_running_s=r1 * shrink)

    return bound


def tpot_mean(p: LevelPrediction) -> float | None:
    """The simulated mean TPOT the fit holds to the measured one: the window's, else (a window that
    caught no request) every finished request's, so that a factor's nudge never turns into a miss."""
    return p.tpot_mean_s if p.tpot_mean_s is not None else p.tpot_mean_all_s


def ttft_p50(p: LevelPrediction) -> float | None:
    return p.ttft_p50_s if p.ttft_p50_s is not None else p.ttft_p50_all_s


def ttft_mean(p: LevelPrediction) -> float | None:
    return p.ttft_mean_s


def prefill_phase(p: LevelPrediction) -> float | None:
    return p.prefill_phase_mean_s


def tpot_target(m: dict) -> float | None:
    return m.get("tpot_mean_s") if m.get("tpot_mean_s") is not None else m.get("tpot_p50_s")
