"""How far a served step's time wanders from the step model's one figure, measured on a run.

The step model prices a step shape once; a served step is not that steady. The garbage collector,
the event loop taking the GIL to stream, the OS and whatever else the host runs add milliseconds to
some steps and not to others. Without that, a simulated closed loop keeps its users in lockstep
(they all start at once and nothing pulls them apart): TTFT P99 equals P50, and there is no tail
under TTFT P99 or TPOT P95 (docs/planning.md, "Step-time jitter").

At a fitted run's concurrency-1 level every inter-token gap is one decode step of one request, the
same shape each time, so the gaps' spread about their median is the step's own wander. Its
percentiles are kept in the profile, and the simulator adds a draw from them to every step.
Additive, in seconds, not a ratio: a pause costs a 2-ms step and a 100-ms prefill the same
milliseconds. Draws are independent step to step (a slow minute of the host is the fit's business,
not the jitter's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analyzers.diagnosis_error import DiagnosisError
from rundir import RunDir
from rundir.table import RequestTable

# Enough gaps that the 99th percentile rests on a few of them, not on one.
MIN_GAPS = 200
GRID = 101  # percentiles 0, 1, ..., 100


@dataclass(frozen=True)
class StepJitter:
    """Percentiles 0..100 of (gap - median gap), seconds, from `n_gaps` gaps of level `level_id`."""

    excess_s: tuple[float, ...]
    level_id: str
    n_gaps: int

    def __post_init__(self) -> None:
        xs = self.excess_s
        if len(xs) != GRID or not all(math.isfinite(x) for x in xs):
            raise DiagnosisError(f"step jitter needs {GRID} finite percentiles, got {len(xs)}")
        if any(b < a for a, b in zip(xs, xs[1:])):
            raise DiagnosisError("step jitter percentiles must not decrease")
        if self.n_gaps < 1:
            raise DiagnosisError("step jitter needs the gaps it was measured from")

    @classmethod
    def from_gaps(cls, gaps: Sequence[float], level_id: str, min_gaps: int = MIN_GAPS) -> StepJitter | None:
        """The jitter of these gaps, or None when there are fewer than `min_gaps` finite ones."""
        g = np.asarray([x for x in gaps if math.isfinite(x) and x >= 0], dtype=float)
        if g.size < min_gaps:
            return None
        excess = np.percentile(g - np.median(g), np.linspace(0, 100, GRID))
        return cls(tuple(float(x) for x in np.maximum.accumulate(excess)), level_id, int(g.size))

    def draw(self, u: float) -> float:
        """The excess at quantile u in [0, 1) (inverse CDF, linear between percentiles)."""
        pos = u * (GRID - 1)
        i = min(int(pos), GRID - 2)
        return self.excess_s[i] + (pos - i) * (self.excess_s[i + 1] - self.excess_s[i])

    def percentile_s(self, q: int) -> float:
        return self.excess_s[q]

    def describe(self) -> str:
        return (
            f"step jitter: the {self.n_gaps} inter-token gaps of {self.level_id} about their median, "
            f"P1 {self.percentile_s(1) * 1e3:+.2f} ms, P90 {self.percentile_s(90) * 1e3:+.2f} ms, "
            f"P99 {self.percentile_s(99) * 1e3:+.2f} ms, added to every simulated step"
        )

    def to_dict(self) -> dict:
        return {"excess_s": list(self.excess_s), "level_id": self.level_id, "n_gaps": self.n_gaps}

    @classmethod
    def from_dict(cls, d: dict) -> StepJitter:
        return cls(tuple(float(x) for x in d["excess_s"]), str(d["level_id"]), int(d["n_gaps"]))


def jitter_of_level(run: RunDir, level_id: str) -> StepJitter | None:
    """The jitter of `level_id`'s measured gaps (its window's successful requests), or None when it
    has too few; meant for a concurrency-1 level, whose gaps are one request's decode steps."""
    table = RequestTable.load(run)
    rows = table.level_rows().get(level_id)
    if rows is None:
        return None
    df = table.df
    ok = df["in_window"].to_numpy(bool) & (df["status"] == "ok").to_numpy()
    mask = np.zeros(len(df), dtype=bool)
    mask[rows] = True
    return StepJitter.from_gaps(table.gaps_of(mask & ok).tolist(), level_id)
