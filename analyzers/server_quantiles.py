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
quantile_range gives the interval the group's pooled quantile can lie in, from the buckets and the
intervals' counts (docs/diagnosis.md, "The router's own time").
"""

from __future__ import annotations

import re
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
    buckets tell; None when no selected row has the quantile. `rows`: a boolean mask or indices.

    Where every such interval has its count (`{h}_count`), the pooled distribution is their
    count-weighted mixture, and each interval's three recorded quantiles (p50, p90, p99) bound its
    share below any x: at least q' once x reaches the upper edge of its q' bucket, less than q' up to
    the lower edge. The pooled quantile lies between the largest edge where the mixture is surely
    still short of q and the smallest where it surely reached it. So one interval of a single slow
    request cannot stretch a level's median to its bucket, as the union of the intervals' buckets
    (the fallback without counts: a mixture's quantile lies between its parts') would."""
    parts = _brackets(numeric, name, rows)
    if not parts:
        return None
    h, q = _split(name)
    union = float(min(lo for lo, _ in parts.values())), float(max(hi for _, hi in parts.values()))
    n = numeric.get(f"{h}_count")  # indexed by row, as parts are
    if n is None or not all(np.isfinite(n[i]) and n[i] > 0 for i in parts):
        return union
    recorded = {qq: _brackets(numeric, f"{h}_p{p}", rows) for p, qq in _quantiles_of(numeric, h).items()}
    shares = {i: [(qq, b.get(i)) for qq, b in recorded.items()] for i in parts}
    target = q * float(sum(n[i] for i in parts)) * (1 - 1e-12)  # shares that sum to q exactly reach it
    his = sorted({b[1] for s in shares.values() for _, b in s if b is not None})
    los = sorted({b[0] for s in shares.values() for _, b in s if b is not None}, reverse=True)

    def surely_reached(x: float) -> bool:  # the mixture's share at or below x is at least q
        return (
            sum(n[i] * max([qq for qq, b in s if b is not None and b[1] <= x], default=0.0) for i, s in shares.items())
            >= target
        )

    def surely_short(x: float) -> bool:  # ... and at x it is below q
        return (
            sum(n[i] * min([qq for qq, b in s if b is not None and b[0] >= x], default=1.0) for i, s in shares.items())
            <= target
        )

    upper = next((x for x in his if surely_reached(x)), float("inf"))
    lower = next((x for x in los if surely_short(x)), 0.0)
    return max(float(lower), union[0]), min(float(upper), union[1])  # both bound it: the tighter of each


def _split(name: str) -> tuple[str, float]:
    """ "ttft_p50" -> ("ttft", 0.5)."""
    h, _, p = name.rpartition("_p")
    return h, int(p) / 100


def _quantiles_of(numeric: dict[str, np.ndarray], h: str) -> dict[str, float]:
    """The quantiles recorded for histogram h, as the series names them: {"50": 0.5, "90": 0.9, ...}."""
    found = (re.fullmatch(rf"{re.escape(h)}_p(\d+)_(?:s|lt_s|gt_s)", k) for k in numeric)
    return {m.group(1): int(m.group(1)) / 100 for m in found if m}


def _brackets(numeric: dict[str, np.ndarray], name: str, rows: np.ndarray) -> dict[int, tuple[float, float]]:
    """Each selected interval's [lo, hi] for its `name` quantile, keyed by its row: its bucket's edges;
    0 below the first bucket's edge, inf above the last finite one; a value recorded without its
    bucket stands for itself."""
    if not numeric:
        return {}
    index = np.arange(len(next(iter(numeric.values()))))[rows]
    nan = np.full(index.shape, np.nan)

    def col(key: str) -> np.ndarray:
        v = numeric.get(key)
        return v[index] if v is not None else nan

    value, lo, hi, below, above = (col(f"{name}{s}") for s in ("_s", "_bucket_s.0", "_bucket_s.1", "_lt_s", "_gt_s"))
    out: dict[int, tuple[float, float]] = {}
    for k, i in enumerate(index):
        if np.isfinite(value[k]):
            bucketed = np.isfinite(lo[k]) and np.isfinite(hi[k])
            out[int(i)] = (float(lo[k]), float(hi[k])) if bucketed else (float(value[k]), float(value[k]))
        elif np.isfinite(below[k]):
            out[int(i)] = (0.0, float(below[k]))
        elif np.isfinite(above[k]):
            out[int(i)] = (float(above[k]), float("inf"))
    return out
