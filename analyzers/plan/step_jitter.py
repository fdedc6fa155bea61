"""How far a served step's time wanders from the step model's one figure, measured on a run.

The step model prices a step shape once; a served step is not that steady. The garbage collector,
the event loop taking the GIL to stream, the OS and whatever else the host runs add milliseconds to
some steps and not to others, and a busy host slows every step for a while. Without that, a
simulated closed loop keeps its users in lockstep (they all start at once and nothing pulls them
apart): TTFT P99 equals P50, and there is no tail under TTFT P99 or TPOT P95 (docs/planning.md,
"Step-time jitter").

At a fitted run's concurrency-1 level every inter-token gap is one decode step of one request, the
same shape each time, so the gaps say how the step wanders, on two time scales:

- the pace: each request's mean gap against the level's (the mean of the requests' means). A
  request lives a fraction of a second, so its mean is the host's speed over that stretch; the
  simulator holds a pace drawn from these for as long as such a request lived (`pace_period_s`)
  and multiplies each step's time by it;
- the excess: each gap less its own request's mean, the step-to-step wander at one pace (a pause
  of the collector or the event loop). Added, in seconds, not as a ratio: a pause costs a 2-ms step
  and a 100-ms prefill the same milliseconds; one draw per step, independent.

Both are kept as percentiles 0..100 in the profile. Both are about the mean, so the wander adds no
time on average: the fitted factors are the steady fit's (the jitter joins after the fit), and only
the spread is new.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analyzers.diagnosis_error import DiagnosisError
from rundir import RunDir
from rundir.table import RequestTable

# Enough gaps that the 99th percentile rests on a few of them, not on one; enough requests, each
# with enough gaps for its mean to be its pace.
MIN_GAPS = 200
MIN_REQUESTS = 5
MIN_REQUEST_GAPS = 5
GRID = 101  # percentiles 0, 1, ..., 100


def _percentiles(x: np.ndarray) -> tuple[float, ...]:
    return tuple(float(v) for v in np.maximum.accumulate(np.percentile(x, np.linspace(0, 100, GRID))))


def _checked(name: str, xs: tuple[float, ...]) -> None:
    if len(xs) != GRID or not all(math.isfinite(x) for x in xs):
        raise DiagnosisError(f"step jitter's {name} needs {GRID} finite percentiles, got {len(xs)}")
    if any(b < a for a, b in zip(xs, xs[1:])):
        raise DiagnosisError(f"step jitter's {name} percentiles must not decrease")


def _inverse_cdf(xs: tuple[float, ...], u: float) -> float:
    """The value at quantile u in [0, 1), linear between percentiles."""
    pos = u * (GRID - 1)
    i = min(int(pos), GRID - 2)
    return xs[i] + (pos - i) * (xs[i + 1] - xs[i])


@dataclass(frozen=True)
class StepJitter:
    """Percentiles 0..100 of each gap less its request's mean gap (`excess_s`, seconds) and of each
    request's mean gap over the level's (`pace`, a ratio held for `pace_period_s`), from `n_gaps`
    gaps of `n_requests` requests of level `level_id`."""

    excess_s: tuple[float, ...]
    pace: tuple[float, ...]
    pace_period_s: float
    level_id: str
    n_gaps: int
    n_requests: int

    def __post_init__(self) -> None:
        _checked("excess", self.excess_s)
        _checked("pace", self.pace)
        if not self.pace[0] > 0:
            raise DiagnosisError("step jitter's pace must be > 0")
        if not self.pace_period_s > 0 or self.n_gaps < 1 or self.n_requests < 1:
            raise DiagnosisError("step jitter needs a positive pace period and the gaps it was measured from")

    @classmethod
    def from_requests(
        cls, gaps_per_request: Sequence[Sequence[float]], level_id: str, min_gaps: int = MIN_GAPS
    ) -> StepJitter | None:
        """The jitter of these requests' gaps (each request's own list, in order), or None when they
        hold fewer than `min_gaps` gaps, or fewer than MIN_REQUESTS requests with MIN_REQUEST_GAPS."""
        kept = [np.asarray([x for x in gs if math.isfinite(x) and x >= 0]) for gs in gaps_per_request]
        kept = [g for g in kept if g.size >= MIN_REQUEST_GAPS]
        if len(kept) < MIN_REQUESTS or sum(g.size for g in kept) < min_gaps:
            return None
        means = np.array([g.mean() for g in kept])
        if not means.mean() > 0:
            return None
        excess = np.concatenate([g - m for g, m in zip(kept, means)])
        spans = np.array([g.sum() for g in kept])
        return cls(
            _percentiles(excess),
            _percentiles(means / means.mean()),
            float(np.median(spans)),
            level_id,
            int(excess.size),
            len(kept),
        )

    def draw_excess(self, u: float) -> float:
        return _inverse_cdf(self.excess_s, u)

    def draw_pace(self, u: float) -> float:
        return _inverse_cdf(self.pace, u)

    def describe(self) -> str:
        return (
            f"step jitter: {self.n_gaps} inter-token gaps of {self.n_requests} requests of {self.level_id}: "
            f"pace P10 x{self.pace[10]:.2f}, P90 x{self.pace[90]:.2f} (held {self.pace_period_s:.2f} s), "
            f"then each step P90 {self.excess_s[90] * 1e3:+.2f} ms, P99 {self.excess_s[99] * 1e3:+.2f} ms"
        )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> StepJitter:
        try:
            return cls(
                tuple(float(x) for x in d["excess_s"]),
                tuple(float(x) for x in d["pace"]),
                float(d["pace_period_s"]),
                str(d["level_id"]),
                int(d["n_gaps"]),
                int(d["n_requests"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise DiagnosisError(f"the profile's step_jitter lacks or mistypes a field: {exc}") from None


def jitter_of_level(run: RunDir, level_id: str) -> StepJitter | None:
    """The jitter of `level_id`'s measured requests (its window's successful ones), or None when they
    hold too few gaps; meant for a concurrency-1 level, whose gaps are one request's decode steps."""
    table = RequestTable.load(run)
    rows = table.level_rows().get(level_id)
    if rows is None:
        return None
    df = table.df
    ok = df["in_window"].to_numpy(bool) & (df["status"] == "ok").to_numpy()
    measured = rows[ok[rows]]
    mask = np.zeros(len(df), dtype=bool)
    mask[measured] = True
    owner = table.itl_row[mask[table.itl_row]] if table.itl.size else table.itl_row
    gaps = table.gaps_of(mask)  # the measured requests' gaps, each tagged with its row in `owner`
    return StepJitter.from_requests([gaps[owner == row].tolist() for row in measured], level_id)
