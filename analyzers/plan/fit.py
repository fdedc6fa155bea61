"""A profile fitted to a measured sweep: what the microbenchmarks cannot see, learned from the run.

A served engine pays per step more than the offline engine calibrate measures (the HTTP server's
event loop streams every token of every request and shares the GIL with the engine thread; the
load generator shares the CPU), its operators run slower or faster than alone, and each request
pays once for HTTP and tokenization before the scheduler sees it. So three efficiency factors are
fitted, to the levels given:

- TPOT is the time between a request's steps: each level's measured mean TPOT (its P50 where the
  mean is not recorded; throughput follows the mean, and a noisy machine skews the two apart) is
  regressed on the simulated step's operator time c and its batch B as  TPOT = s x c + a + b x B:
  s scales every operator (compute_scale), a + b x B is the step overhead. Three or more levels fit
  all three; two fit s and a (b kept); one fits s alone. Two passes, each on a fresh simulation.
- the request overhead (HTTP and tokenization before the scheduler sees a request, on an event loop
  that is busy streaming the others): each level's measured minus predicted TTFT P50 is added to
  the overhead it already had, and  r0 + r1 x B  fitted to those (least squares, both >= 0).

The fitted levels' remaining errors are the fit's error; levels not fitted are predictions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from analyzers.diagnosis_error import DiagnosisError
from analyzers.plan.predict import LevelPrediction
from analyzers.plan.profile import LinearCost, MachineProfile

Predictor = Callable[[MachineProfile], list[LevelPrediction]]


@dataclass
class FitResult:
    profile: MachineProfile
    fitted_levels: list[str]
    step_overhead_before: LinearCost
    request_overhead_before_s: float


PRIOR_WEIGHT = 0.1  # how strongly the profile's own factors hold where the run does not decide them


def solve_factors(
    points: list[tuple[float, float, float]], a: float, b: float, fit_scale: bool = True
) -> tuple[float, float, float]:
    """(c, B, y) points -> (s, a, b) >= 0 of y = s x c + a + b x B, in relative error (each row over its y),
    with weak prior rows pulling towards s = 1 and the given a, b, so that two or three levels give a
    well-posed answer. Non-negative least squares by trying every set of factors held at zero."""
    import itertools

    import numpy as np

    ys = np.array([p[2] for p in points])
    y_mean, batch_mean = float(ys.mean()), float(np.mean([p[1] for p in points]))
    rows = [[c / y, 1 / y, batch / y] for c, batch, y in points]
    rhs = [1.0] * len(points)
    w = PRIOR_WEIGHT
    rows += [[w, 0, 0], [0, w / y_mean, 0], [0, 0, w * batch_mean / y_mean]]
    rhs += [w, w * a / y_mean, w * b * batch_mean / y_mean]
    m, v = np.array(rows), np.array(rhs)
    fixed = np.array([0.0 if fit_scale else 1.0, 0.0, 0.0])  # s = 1: operators as measured
    free = [0, 1, 2] if fit_scale else [1, 2]
    best: tuple[float, np.ndarray] | None = None
    for mask in itertools.product((True, False), repeat=len(free)):
        cols = [i for i, on in zip(free, mask) if on]
        x = fixed.copy()
        if cols:
            x[cols] = np.linalg.lstsq(m[:, cols], v - m @ fixed, rcond=None)[0]
        if (x < 0).any():
            continue
        err = float(np.sum((m @ x - v) ** 2))
        if best is None or err < best[0]:
            best = (err, x)
    assert best is not None  # every free factor at zero is always feasible
    s, a, b = best[1]
    return max(float(s), 0.01), float(a), float(b)


def nonneg_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(x, y) -> (a, b) >= 0 of y = a + b x, least squares; one point, or one x, is a constant."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    n = len(points)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 1e-12:
        return max(0.0, my), 0.0
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    a = my - b * mx
    if b < 0:
        return max(0.0, my), 0.0
    if a < 0:
        return 0.0, max(0.0, sum(x * y for x, y in points) / max(sum(x * x for x in xs), 1e-30))
    return a, b


def _tpot_target(m: dict) -> float | None:
    return m.get("tpot_mean_s") if m.get("tpot_mean_s") is not None else m.get("tpot_p50_s")


def fit_profile(
    profile: MachineProfile,
    predict: Predictor,
    measured: dict[str, dict],
    run_id: str,
    passes: int = 2,
    fit_scale: bool = True,
) -> FitResult:
    """`predict(profile)` simulates the fitted levels; `measured[level_id]` holds their metrics.
    `fit_scale=False` keeps the operators as measured (a model too small to say what they cost)."""
    if not measured:
        raise DiagnosisError("nothing to fit: no measured level with TTFT and TPOT")
    fitted = profile
    for _ in range(passes):
        preds = [p for p in predict(fitted) if p.level_id in measured]
        pts = [
            (p.mean_compute_s, p.mean_batch, y)
            for p in preds
            if p.mean_compute_s > 0 and (y := _tpot_target(measured[p.level_id])) is not None
        ]
        if not pts:
            raise DiagnosisError("nothing to fit: no fitted level has a measured TPOT")
        ov = fitted.step_overhead
        scale, a, b = solve_factors(pts, ov.fixed_s, ov.per_unit_s, fit_scale)
        fitted = dataclasses.replace(
            fitted,
            compute_scale=fitted.compute_scale * scale,
            step_overhead=LinearCost(a, b, ov.lo, max(ov.hi, max(x for _, x, _ in pts))),
        )
    preds = [p for p in predict(fitted) if p.level_id in measured]
    r0, r1 = fitted.request_overhead_s, fitted.request_overhead_per_running_s
    pts2 = [
        (p.mean_batch, max(0.0, r0 + r1 * p.mean_batch + measured[p.level_id]["ttft_p50_s"] - p.ttft_p50_s))
        for p in preds
        if p.ttft_p50_s is not None and measured[p.level_id].get("ttft_p50_s") is not None
    ]
    if pts2:
        r0, r1 = nonneg_line(pts2)
    ov = fitted.step_overhead
    fitted = dataclasses.replace(
        fitted,
        source="fitted",
        request_overhead_s=r0,
        request_overhead_per_running_s=r1,
        assumptions=[
            *profile.assumptions,
            f"fitted to run {run_id} ({', '.join(sorted(measured))}): operators x "
            f"{fitted.compute_scale:.2f}, step overhead {ov.fixed_s * 1e3:.2f} ms + "
            f"{ov.per_unit_s * 1e6:.0f} us/request, request overhead {r0 * 1e3:.1f} ms + "
            f"{r1 * 1e3:.2f} ms per running request",
        ],
    )
    return FitResult(fitted, sorted(measured), profile.step_overhead, profile.request_overhead_s)
