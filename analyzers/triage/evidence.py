"""Probe samples set against the tail: which sample intervals overlap a spike window, which are calm.

A probe row at time t describes the interval [t - dt, t] (its `dt_s`, or the gap to the previous
row). The P99 checks compare a quantity over the intervals that overlap spike windows with the
same quantity over the calm intervals of the run's measured span: a cause must be present in the
spikes and clearly less present in the calm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.probe_series import ProbeSeries
from analyzers.triage.tail_windows import TailWindows, Window, overlaps


@dataclass
class SampleSplit:
    """A probe's rows inside the measured span, split into spike and calm intervals."""

    series: ProbeSeries
    start: np.ndarray  # interval start of each kept row
    end: np.ndarray  # = the row's t
    spike: np.ndarray  # bool: the interval overlaps a spike window
    keep: np.ndarray  # the rows (of series) kept: those inside the measured span

    @property
    def n_spike(self) -> int:
        return int(self.spike.sum())

    @property
    def n_calm(self) -> int:
        return int((~self.spike).sum())

    def has(self, field: str) -> bool:
        v = self.series.numeric.get(field)
        return v is not None and bool(np.isfinite(v[self.keep]).any())

    def values(self, field: str) -> np.ndarray:
        v = self.series.numeric.get(field)
        return np.full(self.keep.sum(), np.nan) if v is None else v[self.keep]

    def fields(self, prefix: str) -> list[str]:
        return [k for k in self.series.numeric if k.startswith(prefix)]

    def seconds(self) -> tuple[float, float]:
        d = self.end - self.start
        return float(d[self.spike].sum()), float(d[~self.spike].sum())

    def rate(self, field: str) -> tuple[float, float, float, float]:
        """(count in spikes, count in calm, per second in spikes, per second in calm) of a delta field."""
        v = np.nan_to_num(self.values(field))
        s_spike, s_calm = self.seconds()
        c_spike, c_calm = float(v[self.spike].sum()), float(v[~self.spike].sum())
        return c_spike, c_calm, c_spike / s_spike if s_spike else 0.0, c_calm / s_calm if s_calm else 0.0

    def mean(self, field: str) -> tuple[float | None, float | None]:
        """Mean of a gauge over spike intervals and over calm intervals (None where there are none)."""
        v = self.values(field)
        return finite_mean(v[self.spike]), finite_mean(v[~self.spike])

    def windows_where(self, tails: TailWindows, mask: np.ndarray) -> list[Window]:
        """The spike windows that a kept interval with `mask` True overlaps."""
        m = mask & self.spike
        return tails.windows_hit(self.start[m], self.end[m])


def split_samples(series: ProbeSeries | None, tails: TailWindows) -> SampleSplit | None:
    """None when there is no series, or none of its rows falls in the measured span."""
    if series is None or len(series) == 0 or tails.span.seconds <= 0:
        return None
    t = series.t
    dt = series.numeric.get("dt_s")
    gaps = np.diff(t)
    typical = float(np.median(gaps)) if gaps.size else 1.0
    start = t - np.concatenate([[typical], gaps])
    if dt is not None:
        start = np.where(np.isfinite(dt), t - dt, start)
    keep = (start <= tails.span.end) & (t >= tails.span.start)
    if not keep.any():
        return None
    s, e = start[keep], t[keep]
    return SampleSplit(series, s, e, overlaps(s, e, tails.spikes), keep)


def lift(spike: float | None, calm: float | None) -> float:
    """How many times more of something the spikes had than the calm (inf when the calm had none)."""
    if not spike:
        return 0.0
    if not calm:
        return float("inf")
    return spike / calm


def finite_mean(v: np.ndarray) -> float | None:
    """Mean of the finite values (None when there are none)."""
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else None
