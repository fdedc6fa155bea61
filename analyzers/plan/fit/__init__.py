"""A profile fitted to a measured sweep: what the microbenchmarks cannot see, learned from the run.

A served engine pays per step more than the offline engine calibrate measures (the HTTP server's
event loop streams every token of every request and shares the GIL with the engine thread; the
load generator shares the CPU), its operators run slower or faster than alone, and each request
pays once for HTTP and tokenization before the scheduler sees it. So up to six efficiency factors are
fitted, to the levels given:

- the step: s scales every operator (compute_scale) and a + b x B is the step overhead, fitted so
  that each level's simulated mean TPOT matches its measured one (its P50 where the mean is not
  recorded; throughput follows the mean, and a noisy machine skews the two apart).
- the request overhead (HTTP and tokenization before the scheduler sees a request, on an event loop
  that is busy streaming the others) r0 + r1 x (requests running then) + r2 x (its prompt tokens):
  measured where the run has the server's own TTFT histogram (the client's mean TTFT less the
  server's, against the server's running gauge and the prompts' length:
  analyzers/plan/outside_server.py; r2 only where the fitted levels ran two prompt lengths, else the
  profile's), else r0 and r1 fitted to TTFT P50.
- the prefill: where the server also publishes its prefill phase (first scheduled to first token),
  the lightest fitted level's simulated phase is held to the server's, and a fourth factor, the share of
  the operators' time computed at fewer threads (profile.contended_share), is fitted with the step's
  three. On a host whose cores the load generator and the server's event loop share with the
  engine, a served prefill runs as if on fewer threads (tiny-test at 512-token prompts: 3.9 ms
  served against 1.9 priced on two threads; a prefill's matmul on one thread takes up to twice as
  long, a decode's about the same), which one operator scale cannot give both a decode step and a
  long prefill. Without fewer-thread tables (a GPU) the share has no effect and stays 0. Without the
  phase, the lightest level's TTFT stands in for it.

How a factor reaches a metric is the simulator's business, not a formula's: under pipeline
parallelism a token waits for every micro-batch's step overhead on the driver, not its own alone,
and a closed loop feeds a slower TTFT back into fewer requests running. So each pass is a
Gauss-Newton step on the simulation itself: the levels are simulated at the current factors and
once with each factor nudged, the slopes found that way linearize the metric, and the factors come
from non-negative least squares in relative error, with weak prior rows pulling towards the
profile's own values so that two levels give a well-posed answer. The pass whose factors match the
fitted levels best is kept. The fitted levels' remaining errors are the fit's error; levels not
fitted are predictions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from analyzers.diagnosis_error import DiagnosisError
from analyzers.plan.fit.factors import (
    CONTENDED_FACTOR,
    REQUEST_FACTORS,
    STEP_FACTORS,
    prefill_phase,
    request_overhead_bound,
    tpot_mean,
    tpot_target,
    ttft_mean,
    ttft_p50,
)
from analyzers.plan.fit.gauss_newton import Factor, Metric, Predictor, fit_factors
from analyzers.plan.fit.solve import Linearized, solve_factors
from analyzers.plan.outside_server import OutsideTime, prompt_term_levels, request_overhead_of
from analyzers.plan.predict import LevelPrediction
from analyzers.plan.profile import LinearCost, MachineProfile
from analyzers.plan.request_overhead import RequestOverhead

__all__ = ["FitResult", "Linearized", "Predictor", "fit_profile", "solve_factors"]


@dataclass
class FitResult:
    profile: MachineProfile
    fitted_levels: list[str]
    step_overhead_before: LinearCost
    request_overhead_before: RequestOverhead
    request_overhead_from: str = "fitted to TTFT P50"


def fit_jointly(
    profile: MachineProfile,
    predict: Predictor,
    tpot: dict[str, float],
    other: dict[str, float],
    free: Sequence[bool],
    passes: int,
    other_metric: Metric,
    factors: Sequence[Factor] = STEP_FACTORS,
) -> MachineProfile:
    """`factors` fitted to the levels' mean TPOT and to `other` (read by `other_metric`: a TTFT or a
    prefill phase) at once: each level appears twice to the Gauss-Newton passes, once per metric."""

    def both(profile: MachineProfile) -> list[LevelPrediction]:
        out = []
        for p in predict(profile):
            out += [
                dataclasses.replace(p, level_id=f"{p.level_id}|tpot"),
                dataclasses.replace(p, level_id=f"{p.level_id}|other"),
            ]
        return out

    def metric(p: LevelPrediction) -> float | None:
        return tpot_mean(p) if p.level_id.endswith("|tpot") else other_metric(p)

    targets = {f"{lid}|tpot": y for lid, y in tpot.items()} | {f"{lid}|other": y for lid, y in other.items()}
    return fit_factors(profile, both, targets, metric, factors, free, passes)


def fit_profile(
    profile: MachineProfile,
    predict: Predictor,
    measured: dict[str, dict],
    run_id: str,
    passes: int = 3,
    fit_scale: bool = True,
    outside: Sequence[OutsideTime] = (),
) -> FitResult:
    """`predict(profile)` simulates the fitted levels; `measured[level_id]` holds their metrics.
    `fit_scale=False` keeps the operators as measured (a model too small to say what they cost).
    `outside`: the fitted levels' measured time outside the server; when every level with a TTFT
    has one, the request overhead is drawn through them instead of fitted."""
    if not measured:
        raise DiagnosisError("nothing to fit: no measured level with TTFT and TPOT")
    tpot = {lid: y for lid, m in measured.items() if (y := tpot_target(m)) is not None and y > 0}
    if not tpot:
        raise DiagnosisError("nothing to fit: no fitted level has a measured TPOT")
    # The step overhead's measured range grows to the batches the fitted levels run (no extrapolation note for them).
    widest = max((p.mean_batch for p in predict(profile) if p.level_id in tpot), default=0.0)
    ov = profile.step_overhead
    fitted = dataclasses.replace(
        profile, step_overhead=LinearCost(ov.fixed_s, ov.per_unit_s, ov.lo, max(ov.hi, widest))
    )

    ttft = {lid: y for lid, m in measured.items() if (y := m.get("ttft_p50_s")) is not None and y > 0}
    measured_overhead = bool(ttft) and {o.level_id for o in outside} >= set(ttft)
    if measured_overhead:
        times = [o for o in outside if o.level_id in ttft]
        overhead = request_overhead_of(times, profile.request_overhead_per_prompt_token_s)
        fitted = fitted.with_request_overhead(overhead)
        overhead_from = "measured: the client's mean TTFT less the server's own, by running requests" + (
            " and prompt tokens" if prompt_term_levels(times) else ""
        )
        # With the time outside the server measured, the lightest level's TTFT is its prefill: it pins
        # what the operators cost in a long step, which decode-bound TPOTs alone leave to the prior.
        # Its mean, where the run has it: the time outside is a difference of means, and a TTFT
        # skewed by a few slow requests has its median below its mean, which left the prefill that
        # much short (tiny-test: 1.4 ms simulated against the server's 2.0 at c1; bench/RESULTS.md).
        # The lightest level's phase only: there a prefill runs alone and its phase is its price. A
        # loaded level's phase is mostly the scheduler's queueing among the running (the simulator's
        # own to reproduce, and the TPOT targets' to constrain); held to it as well, the fit traded
        # the unloaded prefill away (`tiny` TP1: its c1 prefill 17% short, operators x 0.70; with the
        # lightest only, x 1.04: docs/planning.md).
        unloaded = min((o for o in times if o.prefill_s), key=lambda o: (o.running, o.level_id), default=None)
        prefill = {unloaded.level_id: unloaded.prefill_s} if unloaded and unloaded.prefill_s else {}
        if prefill:
            overhead_from += "; the prefill held to the server's prefill phase"
            fitted = fit_jointly(
                fitted,
                predict,
                tpot,
                prefill,
                # The share, like the scale, is the operators': a run too small to say what they cost
                # (fit_scale False: calibrate's served tiny-test) holds it at the profile's.
                (fit_scale, True, True, fit_scale),
                passes,
                prefill_phase,
                (*STEP_FACTORS, CONTENDED_FACTOR),
            )
        else:
            lightest = min(times, key=lambda o: o.running).level_id
            mean = measured[lightest].get("ttft_mean_s")
            target, metric = (mean, ttft_mean) if mean else (ttft[lightest], ttft_p50)
            fitted = fit_jointly(fitted, predict, tpot, {lightest: target}, (fit_scale, True, True), passes, metric)
    else:
        overhead_from = "fitted to TTFT P50"
        fitted = fit_factors(fitted, predict, tpot, tpot_mean, STEP_FACTORS, (fit_scale, True, True), passes)
        if ttft:
            running = max((p.mean_batch for p in predict(fitted) if p.level_id in ttft), default=0.0)
            bound = request_overhead_bound(running, min(ttft.values()))
            fitted = fit_factors(
                bound(fitted), predict, ttft, ttft_p50, REQUEST_FACTORS, (True, True), passes - 1, bound
            )
    ov = fitted.step_overhead
    fitted = dataclasses.replace(
        fitted,
        source="fitted",
        assumptions=[
            *profile.assumptions,
            f"fitted to run {run_id} ({', '.join(sorted(measured))}): operators x "
            f"{fitted.compute_scale:.2f}, step overhead {ov.fixed_s * 1e3:.2f} ms + "
            f"{ov.per_unit_s * 1e6:.0f} us/request, {fitted.contended_share:.0%} of the operators at fewer "
            f"threads, {fitted.request_overhead.describe()} ({overhead_from})",
        ],
    )
    return FitResult(fitted, sorted(measured), profile.step_overhead, profile.request_overhead, overhead_from)
