"""Gauss-Newton on the simulation: the fitted levels simulated at the current factors and once with
each factor nudged, the slopes linearize each metric, solve.py gives the next factors; the pass that
matches the fitted levels best is kept."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from analyzers.plan.fit.solve import Linearized, solve_factors
from analyzers.plan.predict import LevelPrediction
from analyzers.plan.profile import MachineProfile

Predictor = Callable[[MachineProfile], list[LevelPrediction]]


@dataclass(frozen=True)
class Factor:
    """One efficiency factor of a profile: how to read it, set it, and how far to nudge it for a slope."""

    name: str
    get: Callable[[MachineProfile], float]
    put: Callable[[MachineProfile, float], MachineProfile]
    nudge: Callable[[float], float]  # current value -> step (large enough to move a discrete simulation)


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


def fit_factors(
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
