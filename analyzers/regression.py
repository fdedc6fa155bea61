"""Regression gates for CI: which of a comparison's deltas break a tolerance.

A regression is a delta `compare_runs` already calls `worse` (its 95% bootstrap interval excludes
zero, and it is larger than the comparison's min_effect) that is also larger than the gate's
tolerance, or a percentile of B that reached its failed requests (unbounded, where A's was not), on one of the metrics a gate watches: output throughput, TTFT P99 and TPOT P95 by
default. A change the intervals cannot tell from noise never fails a build, however large its
point estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from analyzers.compare import Comparison

GATED_METRICS = ("output tok/s", "TTFT P99", "TPOT P95")


@dataclass(frozen=True)
class Regression:
    level_id: str
    metric: str
    a: float
    b: float | None  # None: B's percentile reached its failed requests (unbounded)
    rel: float | None  # (b - a) / a; None when B is unbounded
    ci: tuple[float, float] | None  # 95% interval of b - a
    note: str = ""


@dataclass
class GateResult:
    tolerance: float  # a fraction: 0.05 is 5%
    metrics: tuple[str, ...]
    checked: int = 0  # (level, metric) pairs the gate looked at
    regressions: list[Regression] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.regressions)


def parse_tolerance(text: str) -> float:
    """'5%' or '0.05' -> 0.05; ValueError with the reason otherwise."""
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"a tolerance is a percentage like 5% or a fraction like 0.05, got {text!r}") from None
    if not 0 <= value < 10:
        raise ValueError(f"a tolerance must be between 0% and 1000%, got {text!r}")
    return value


def regression_gate(
    comparisons: list[Comparison], tolerance: float, metrics: tuple[str, ...] = GATED_METRICS
) -> GateResult:
    result = GateResult(tolerance, metrics)
    for c in comparisons:
        for lc in c.levels:
            for d in lc.deltas:
                if d.metric not in metrics or d.verdict == "n/a":
                    continue
                result.checked += 1
                if d.verdict != "worse" or d.a is None:
                    continue
                if d.b is not None and math.isinf(d.b):
                    # B's percentile reached requests that failed: worse by more than any tolerance.
                    result.regressions.append(Regression(lc.level_id, d.metric, d.a, None, None, None, d.note))
                elif d.rel is not None and abs(d.rel) > tolerance and d.b is not None and d.ci is not None:
                    result.regressions.append(
                        Regression(lc.level_id, d.metric, d.a, d.b, d.rel, (float(d.ci[0]), float(d.ci[1])))
                    )
    return result
