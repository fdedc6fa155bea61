"""Least squares for a profile's factors: each fitted level's metric, linearized near the current
factors, brought nearest its measurement in relative error, every factor pulled weakly towards the
profile's own value (analyzers/plan/fit/__init__.py says how the factors reach the metrics)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analyzers.diagnosis_error import DiagnosisError

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
