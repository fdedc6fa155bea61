"""A profile fitted to a measured sweep: what the microbenchmarks cannot see, learned from the run.

A served engine pays per step more than the offline engine calibrate measures (the HTTP server's
event loop streams every token of every request and shares the GIL with the engine thread; the
load generator shares the CPU), its operators run slower or faster than alone, and each request
pays once for HTTP and tokenization before the scheduler sees it. So five efficiency factors are
fitted, to the levels given:

- the step: s scales every operator (compute_scale) and a + b x B is the step overhead, fitted so
  that each level's simulated mean TPOT matches its measured one (its P50 where the mean is not
  recorded; throughput follows the mean, and a noisy machine skews the two apart).
- the request overhead (HTTP and tokenization before the scheduler sees a request, on an event loop
  that is busy streaming the others) r0 + r1 x (requests running then): measured where the run has
  the server's own TTFT histogram (the client's mean TTFT less the server's, against the server's
  running gauge: analyzers/plan/outside_server.py), else fitted to TTFT P50.
- the prefill: where the server also publishes its prefill phase (first scheduled to first token),
  each fitted level's simulated phase is held to the server's, and a fourth factor, the share of
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
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from analyzers.diagnosis_error import DiagnosisError
from analyzers.plan.outside_server import OutsideTime, request_overhead_of
from analyzers.plan.predict import LevelPrediction
from analyzers.plan.profile import LinearCost, MachineProfile

Predictor = Callable[[MachineProfile], list[LevelPrediction]]


@dataclass
class FitResult:
    profile: MachineProfile
    fitted_levels: list[str]
    step_overhead_before: LinearCost
    request_overhead_before_s: float
    request_overhead_from: str = "fitted to TTFT P50"


PRIOR_WEIGHT = 0.1  # how strongly the profile's own factors hold where the run does not decide them


@dataclass(frozen=True)
class Linearized:
    """One level's simulated metric near the current factors, y ~ base + sum(slopes[j] x factor[j]),
    beside its measured value."""

    slopes: tuple[float, ...]
    base: float
    measured: float

    def __post_init__(self) -> None:
        if not self.measured > 0:
            raise DiagnosisError(f"a fitted level needs a positive measurement, got {self.measured}")


def solve_factors(
    points: Sequence[Linearized], prior: Sequence[float], free: Sequence[bool] | None = None
) -> tuple[float, ...]:
    """The factors >= 0 that bring every point's linearized metric nearest its measurement (relative
    error), each pulled weakly towards `prior`; a factor not `free` stays at its prior. Non-negative
    least squares by trying every set of free factors held at zero."""
    n = len(prior)
    free = [True] * n if free is None else list(free)
    if not points or any(len(p.slopes) != n for p in points):
        raise DiagnosisError("solve_factors needs points with one slope per factor")
    y_mean = float(np.mean([p.measured for p in points]))
    rows = [[g / p.measured for g in p.slopes] for p in points]
    rhs = [1.0 - p.base / p.measured for p in points]
    for j in range(n):  # a prior row, in units of the factor's typical share of the metric
        weight = PRIOR_WEIGHT * (float(np.mean([abs(p.slopes[j]) for p in points])) / y_mean or 1.0)
        rows.append([weight if i == j else 0.0 for i in range(n)])
        rhs.append(weight * prior[j])
    m, v = np.array(rows), np.array(rhs)
    held = np.array([0.0 if free[j] else prior[j] for j in range(n)])
    free_cols = [j for j in range(n) if free[j]]
    best: tuple[float, np.ndarray] | None = None
    for mask in itertools.product((True, False), repeat=len(free_cols)):
        cols = [j for j, on in zip(free_cols, mask) if on]
        x = held.copy()
        if cols:
            x[cols] = np.linalg.lstsq(m[:, cols], v - m @ held, rcond=None)[0]
        if (x < 0).any():
            continue
        err = float(np.sum((m @ x - v) ** 2))
        if best is None or err < best[0]:
            best = (err, x)
    assert best is not None  # every free factor at zero is always feasible
    return tuple(float(x) for x in best[1])


@dataclass(frozen=True)
class Factor:
    """One efficiency factor of a profile: how to read it, set it, and how far to nudge it for a slope."""

    name: str
    get: Callable[[MachineProfile], float]
    put: Callable[[MachineProfile, float], MachineProfile]
    nudge: Callable[[float], float]  # current value -> step (large enough to move a discrete simulation)


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

Metric = Callable[[LevelPrediction], float | None]


def _misfit(preds: list[LevelPrediction], targets: dict[str, float], metric: Metric) -> float:
    """Sum of squared relative errors over the targets; a level the simulation gives no value is a miss of 1."""
    by_id = {p.level_id: metric(p) for p in preds}
    total = 0.0
    for lid, y in targets.items():
        got = by_id.get(lid)
        total += 1.0 if got is None else (got / y - 1) ** 2
    return total


def _gauss_newton_step(
    profile: MachineProfile,
    base: list[LevelPrediction],
    predict: Predictor,
    targets: dict[str, float],
    metric: Metric,
    factors: Sequence[Factor],
    free: Sequence[bool],
) -> MachineProfile:
    y0 = {p.level_id: v for p in base if (v := metric(p)) is not None and p.level_id in targets}
    theta0 = [f.get(profile) for f in factors]
    slopes: list[dict[str, float]] = []
    for f, value, on in zip(factors, theta0, free):
        if not on:
            slopes.append({})
            continue
        step = f.nudge(value)
        moved = {p.level_id: v for p in predict(f.put(profile, value + step)) if (v := metric(p)) is not None}
        slopes.append({lid: (moved[lid] - y0[lid]) / step for lid in y0 if lid in moved})
    points = []
    for lid, y in y0.items():
        g = tuple(s.get(lid, 0.0) for s in slopes)
        points.append(Linearized(g, y - sum(gi * ti for gi, ti in zip(g, theta0)), targets[lid]))
    if not points:
        return profile
    for f, value in zip(factors, solve_factors(points, theta0, free)):
        profile = f.put(profile, value)
    return profile


def _fit(
    profile: MachineProfile,
    predict: Predictor,
    targets: dict[str, float],
    metric: Metric,
    factors: Sequence[Factor],
    free: Sequence[bool],
    passes: int,
    bound: Callable[[MachineProfile], MachineProfile] = lambda p: p,
) -> MachineProfile:
    """Gauss-Newton passes on the simulation, each step's factors brought inside `bound`; the
    profile (the start included) that fits best."""
    best: tuple[float, MachineProfile] | None = None
    current = profile
    for i in range(passes + 1):
        base = predict(current)
        err = _misfit(base, targets, metric)
        if best is None or err < best[0]:
            best = (err, current)
        if i < passes:
            current = bound(_gauss_newton_step(current, base, predict, targets, metric, factors, free))
    assert best is not None
    return best[1]


def _fit_jointly(
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
        return _tpot_mean(p) if p.level_id.endswith("|tpot") else other_metric(p)

    targets = {f"{lid}|tpot": y for lid, y in tpot.items()} | {f"{lid}|other": y for lid, y in other.items()}
    return _fit(profile, both, targets, metric, factors, free, passes)


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


def _tpot_mean(p: LevelPrediction) -> float | None:
    """The simulated mean TPOT the fit holds to the measured one: the window's, else (a window that
    caught no request) every finished request's, so that a factor's nudge never turns into a miss."""
    return p.tpot_mean_s if p.tpot_mean_s is not None else p.tpot_mean_all_s


def _ttft_p50(p: LevelPrediction) -> float | None:
    return p.ttft_p50_s if p.ttft_p50_s is not None else p.ttft_p50_all_s


def _ttft_mean(p: LevelPrediction) -> float | None:
    return p.ttft_mean_s


def _prefill_phase(p: LevelPrediction) -> float | None:
    return p.prefill_phase_mean_s


def _tpot_target(m: dict) -> float | None:
    return m.get("tpot_mean_s") if m.get("tpot_mean_s") is not None else m.get("tpot_p50_s")


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
    tpot = {lid: y for lid, m in measured.items() if (y := _tpot_target(m)) is not None and y > 0}
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
        r0, r1 = request_overhead_of(times)
        fitted = dataclasses.replace(fitted, request_overhead_s=r0, request_overhead_per_running_s=r1)
        overhead_from = "measured: the client's mean TTFT less the server's own, by running requests"
        # With the time outside the server measured, the lightest level's TTFT is its prefill: it pins
        # what the operators cost in a long step, which decode-bound TPOTs alone leave to the prior.
        # Its mean, where the run has it: the time outside is a difference of means, and a TTFT
        # skewed by a few slow requests has its median below its mean, which left the prefill that
        # much short (tiny-test: 1.4 ms simulated against the server's 2.0 at c1; bench/RESULTS.md).
        prefill = {o.level_id: o.prefill_s for o in times if o.prefill_s}
        if prefill:
            overhead_from += "; the prefill held to the server's prefill phase"
            fitted = _fit_jointly(
                fitted,
                predict,
                tpot,
                prefill,
                # The share, like the scale, is the operators': a run too small to say what they cost
                # (fit_scale False: calibrate's served tiny-test) holds it at the profile's.
                (fit_scale, True, True, fit_scale),
                passes,
                _prefill_phase,
                (*STEP_FACTORS, CONTENDED_FACTOR),
            )
        else:
            lightest = min(times, key=lambda o: o.running).level_id
            mean = measured[lightest].get("ttft_mean_s")
            target, metric = (mean, _ttft_mean) if mean else (ttft[lightest], _ttft_p50)
            fitted = _fit_jointly(fitted, predict, tpot, {lightest: target}, (fit_scale, True, True), passes, metric)
    else:
        overhead_from = "fitted to TTFT P50"
        fitted = _fit(fitted, predict, tpot, _tpot_mean, STEP_FACTORS, (fit_scale, True, True), passes)
        if ttft:
            running = max((p.mean_batch for p in predict(fitted) if p.level_id in ttft), default=0.0)
            bound = request_overhead_bound(running, min(ttft.values()))
            fitted = _fit(bound(fitted), predict, ttft, _ttft_p50, REQUEST_FACTORS, (True, True), passes - 1, bound)
    ov, r0, r1 = fitted.step_overhead, fitted.request_overhead_s, fitted.request_overhead_per_running_s
    fitted = dataclasses.replace(
        fitted,
        source="fitted",
        assumptions=[
            *profile.assumptions,
            f"fitted to run {run_id} ({', '.join(sorted(measured))}): operators x "
            f"{fitted.compute_scale:.2f}, step overhead {ov.fixed_s * 1e3:.2f} ms + "
            f"{ov.per_unit_s * 1e6:.0f} us/request, {fitted.contended_share:.0%} of the operators at fewer "
            f"threads, request overhead {r0 * 1e3:.1f} ms + "
            f"{r1 * 1e3:.2f} ms per running request ({overhead_from})",
        ],
    )
    return FitResult(fitted, sorted(measured), profile.step_overhead, profile.request_overhead_s, overhead_from)
