"""A server histogram's quantile over several scrape intervals: a number where the buckets gave
one, else the bound they gave.

The server probe records each interval's quantile `{h}_p{q}_s` as a number only where it fell in a
bucket with two finite edges; in the first bucket (lower edge 0) it records null and the edge the
quantile is below (`{h}_p{q}_lt_s`), in the +Inf bucket null and the last finite edge it is above
(`{h}_p{q}_gt_s`) (docs/probes.md). Averaging only the numbers would drop the fast intervals and
inflate the figure, so a group of intervals is summarized by its worst one, which is well defined
across the three kinds: within one histogram every interpolated value lies between the first
edge and the last finite one. The exact figure beside it is the count-weighted mean (sum/count).
Where a figure must be set against another (the router's gap, analyzers/triage/fleet/router.py),
quantile_range gives the interval the group's pooled quantile can lie in, from the buckets alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BoundedQuantile:
    value: float | None = None  # the largest interpolated value, when no interval was above the last edge
    below: float | None = None  # every interval's quantile is < this (all fell in the first bucket)
    above: float | None = None  # some interval's quantile is > this (the +Inf bucket)

    def evidence(self, base: str) -> dict[str, float]:
        """`{base}_s`, `{base}_lt_s` or `{base}_gt_s`: the key says whether it is a value or a bound
        (reports render the bounds as "< 300 ms" / "> 7680 s")."""
        if self.above is not None:
            return {f"{base}_gt_s": self.above}
        if self.value is not None:
            return {f"{base}_s": self.value}
        return {f"{base}_lt_s": self.below} if self.below is not None else {}

    def words(self) -> str:
        if self.above is not None:
            return f"> {_ms(self.above)}"
        if self.value is not None:
            return _ms(self.value)
        return f"< {_ms(self.below)}" if self.below is not None else "unknown"


def _ms(v: float) -> str:
    return f"{round(v * 1000, 3):g} ms" if abs(v) < 10 else f"{v:g} s"


def _finite(numeric: dict[str, np.ndarray], key: str, rows: np.ndarray) -> np.ndarray:
    v = numeric.get(key)
    if v is None:
        return np.empty(0)
    v = v[rows]
    return v[np.isfinite(v)]


def worst_quantile(numeric: dict[str, np.ndarray], name: str, rows: np.ndarray) -> BoundedQuantile | None:
    """The largest of the selected rows' `name` quantiles (e.g. "queue_time_p99"), as a value or a
    bound; None when no selected row has one. `rows`: a boolean mask or indices into the series."""
    above, value, below = (_finite(numeric, f"{name}{s}", rows) for s in ("_gt_s", "_s", "_lt_s"))
    if above.size:
        return BoundedQuantile(above=float(above.max()))
    if value.size:
        return BoundedQuantile(value=float(value.max()))
    if below.size:
        return BoundedQuantile(below=float(below.max()))
    return None


def weighted_mean(numeric: dict[str, np.ndarray], h: str, rows: np.ndarray) -> float | None:
    """Count-weighted mean of histogram h's per-interval means (sum/count) over the selected rows."""
    c, m = numeric.get(f"{h}_count"), numeric.get(f"{h}_mean_s")
    if c is None or m is None:
        return None
    c, m = np.nan_to_num(c[rows]), m[rows]
    ok = np.isfinite(m) & (c > 0)
    return float((c[ok] * m[ok]).sum() / c[ok].sum()) if ok.any() else None


def quantile_range(numeric: dict[str, np.ndarray], name: str, rows: np.ndarray) -> tuple[float, float] | None:
    """Where the selected rows' pooled `name` quantile (e.g. "ttft_p50") can lie, as far as their
    buckets tell: from the lowest lower edge to the highest upper edge of the buckets each interval's
    quantile fell in (a mixture's quantile lies between its parts' quantiles, and each part's lies in
    its bucket). The first bucket's lower edge is 0, the +Inf bucket's upper edge inf; a value
    recorded without its bucket (`{name}_bucket_s`) stands for itself. None when no selected row has
    the quantile. `rows`: a boolean mask or indices into the series."""
    value = numeric.get(f"{name}_s")
    lows: list[float] = []
    highs: list[float] = []
    if value is not None:
        v = value[rows]
        lo, hi = (numeric.get(f"{name}_bucket_s.{k}") for k in (0, 1))
        lo = lo[rows] if lo is not None else np.full(v.shape, np.nan)
        hi = hi[rows] if hi is not None else np.full(v.shape, np.nan)
        known = np.isfinite(v)
        bucketed = known & np.isfinite(lo) & np.isfinite(hi)
        lows += list(np.where(bucketed, lo, v)[known])
        highs += list(np.where(bucketed, hi, v)[known])
    below, above = _finite(numeric, f"{name}_lt_s", rows), _finite(numeric, f"{name}_gt_s", rows)
    if below.size:
        lows.append(0.0)
        highs.append(float(below.max()))
    if above.size:
        lows.append(float(above.min()))
        highs.append(float("inf"))
    return (float(min(lows)), float(max(highs))) if lows else None
