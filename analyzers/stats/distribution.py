"""One latency distribution: percentiles with their sample count, and how sure we are of them.

Percentiles are numpy's linear interpolation (docs/metrics.md). Confidence comes from the
bootstrap, vectorized: the resample indices of a batch of resamples are one integer array, and
the percentiles of every resample come from one `np.percentile(axis=1)` call. Above
EXACT_BOOTSTRAP_MAX_N samples the bootstrap's own large-sample form is used instead: the q-th
quantile of a resample of n sorted values is the value at rank K with K ~ Binomial(n, q), so a
draw is one binomial number and one index (that is the distribution-free order-statistic
interval, and what the resampling converges to). Both give B draws per percentile, so a CI and
an A/B delta are computed the same way whichever was used.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PERCENTILES = (50, 90, 95, 99, 99.9)
CI_PERCENTILES = (95, 99)  # the tail percentiles that carry an interval
MIN_SAMPLES_FOR_P99 = 100
BOOTSTRAP_RESAMPLES = 1000
EXACT_BOOTSTRAP_MAX_N = 5000
CI_LEVEL = 0.95
_BATCH_CELLS = 2_000_000  # resample cells per batch: bounds memory at ~16 MB


def pname(q: float) -> str:
    return f"p{q:g}"


@dataclass
class Distribution:
    n: int
    mean: float | None
    p: dict[str, float | None]  # "p50", "p90", "p95", "p99", "p99.9"
    p99_reliable: bool
    ci: dict[str, list[float] | None] = field(default_factory=dict)  # "p95"/"p99" -> [low, high] (95%)

    @classmethod
    def of(cls, values, rng: np.random.Generator | None = None) -> "Distribution":
        """Statistics of `values` (an array or iterable; None and NaN are dropped). With `rng`, also
        bootstrap intervals of P95 and P99."""
        arr = _clean(values)
        if arr.size == 0:
            return cls(0, None, {pname(q): None for q in PERCENTILES}, False)
        qs = np.percentile(arr, PERCENTILES, method="linear")
        ci = {}
        if rng is not None:
            draws = percentile_draws(arr, CI_PERCENTILES, rng)
            ci = {pname(q): interval(draws[:, i]) for i, q in enumerate(CI_PERCENTILES)}
        return cls(
            int(arr.size),
            float(arr.mean()),
            {pname(q): float(v) for q, v in zip(PERCENTILES, qs)},
            arr.size >= MIN_SAMPLES_FOR_P99,
            ci,
        )


def _clean(values) -> np.ndarray:
    if isinstance(values, np.ndarray):
        arr = values.astype(float, copy=False)
    else:
        arr = np.asarray([np.nan if v is None else v for v in values], dtype=float)
    return arr[~np.isnan(arr)]


def percentile_draws(
    values: np.ndarray, qs=CI_PERCENTILES, rng: np.random.Generator | None = None, resamples: int = BOOTSTRAP_RESAMPLES
) -> np.ndarray:
    """Bootstrap draws of the percentiles `qs` of `values`: an array (resamples, len(qs))."""
    rng = rng if rng is not None else np.random.default_rng(0)
    arr = _clean(values)
    n = arr.size
    if n == 0:
        return np.full((resamples, len(qs)), np.nan)
    if n > EXACT_BOOTSTRAP_MAX_N:
        arr = np.sort(arr)
        ranks = rng.binomial(n - 1, np.asarray(qs, dtype=float) / 100.0, size=(resamples, len(qs)))
        return arr[ranks]
    out = np.empty((resamples, len(qs)))
    batch = max(1, _BATCH_CELLS // n)
    for start in range(0, resamples, batch):
        stop = min(resamples, start + batch)
        idx = rng.integers(0, n, size=(stop - start, n), dtype=np.int32 if n < 2**31 else np.int64)
        out[start:stop] = np.percentile(arr[idx], qs, axis=1, method="linear").T
    return out


def sum_draws(
    per_slice: np.ndarray, rng: np.random.Generator | None = None, resamples: int = BOOTSTRAP_RESAMPLES
) -> np.ndarray:
    """Block bootstrap of a total: resample the time slices' amounts (with replacement) and add them up.
    Throughput's uncertainty is how unevenly the work fell over time, which slices capture and a
    per-request resample (every request the same length) would not."""
    rng = rng if rng is not None else np.random.default_rng(0)
    k = per_slice.size
    if k == 0:
        return np.full(resamples, np.nan)
    idx = rng.integers(0, k, size=(resamples, k))
    return per_slice[idx].sum(axis=1)


def interval(draws: np.ndarray, level: float = CI_LEVEL) -> list[float] | None:
    """Percentile interval of bootstrap draws, e.g. [2.5%, 97.5%] for level 0.95; None without draws."""
    d = draws[~np.isnan(draws)]
    if d.size == 0:
        return None
    lo, hi = np.percentile(d, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return [float(lo), float(hi)]
