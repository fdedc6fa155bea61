"""A level's pooled quantile from the server probe's per-interval rows (analyzers/server_quantiles.py):
on a seeded family of levels, each interval's row written by the probe's own field writer from a real
bucketed histogram, the range always holds the pooled data's true quantile, and a lone slow interval
does not stretch the median's range to its bucket."""

from __future__ import annotations

import numpy as np

from analyzers.server_quantiles import quantile_range
from probes.prom import Histogram, Snapshot
from probes.server import _histogram_fields
from refengine.server.metrics import TTFT_BUCKETS

EDGES = (*TTFT_BUCKETS, float("inf"))


def _histogram(values: np.ndarray) -> Histogram:
    return Histogram(
        buckets={le: float((values <= le).sum()) for le in EDGES}, count=float(values.size), sum=float(values.sum())
    )


def _rows(intervals: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The probe's numeric columns for a run of intervals, each interval's fields from its own delta."""
    empty = Snapshot(engine="vllm", values={}, histograms={"ttft": _histogram(np.empty(0))})
    rows = [
        _histogram_fields(Snapshot(engine="vllm", values={}, histograms={"ttft": _histogram(v)}), empty)
        for v in intervals
    ]
    keys = {k for r in rows for k in r if not k.endswith("_bucket_s")}
    keys |= {f"{k}.{j}" for r in rows for k in r if k.endswith("_bucket_s") for j in (0, 1)}
    out: dict[str, np.ndarray] = {}
    for k in keys:
        base, _, j = k.rpartition(".") if k.endswith((".0", ".1")) else (k, "", "")
        col = [r.get(base) for r in rows]
        if j:
            col = [c[int(j)] if c is not None else None for c in col]
        out[k] = np.array([np.nan if c is None else c for c in col], float)
    return out


def _true_quantile(values: np.ndarray, q: float) -> float:
    """inf{x : F(x) >= q} of the pooled samples, the quantile Prometheus's buckets estimate."""
    v = np.sort(values)
    return float(v[int(np.ceil(q * v.size)) - 1])


def _level(rng: np.random.Generator) -> list[np.ndarray]:
    """A level's intervals: 1-11 of them, 1-39 requests each, around one of five latencies, some with
    a few requests far slower."""
    intervals = []
    for _ in range(int(rng.integers(1, 12))):
        n = int(rng.integers(1, 40))
        base = float(rng.choice([0.003, 0.008, 0.03, 0.09, 0.4]))
        v = base * rng.lognormal(0.0, float(rng.uniform(0.05, 1.0)), n)
        if rng.random() < 0.3:
            v[: max(1, n // 10)] *= float(rng.uniform(3, 30))
        intervals.append(v)
    return intervals


def test_the_range_holds_the_pooled_quantile_and_counts_narrow_it():
    rng = np.random.default_rng(20261206)
    narrower = {"ttft_p50": 0, "ttft_p90": 0, "ttft_p99": 0}
    for _ in range(200):
        intervals = _level(rng)
        numeric = _rows(intervals)
        without = {k: v for k, v in numeric.items() if k != "ttft_count"}
        pooled = np.concatenate(intervals)
        everything = np.ones(len(intervals), bool)
        for name, q in (("ttft_p50", 0.5), ("ttft_p90", 0.9), ("ttft_p99", 0.99)):
            truth = _true_quantile(pooled, q)
            lo, hi = quantile_range(numeric, name, everything)
            assert lo <= truth <= hi, (name, lo, hi, truth)
            ulo, uhi = quantile_range(without, name, everything)
            assert ulo <= truth <= uhi, (name, ulo, uhi, truth)
            narrower[name] += (hi - lo) < (uhi - ulo)
    # Where intervals differ, their counts tell which of them the pooled quantile sits in.
    assert min(narrower.values()) >= 100, narrower


def test_one_slow_request_alone_in_its_interval_does_not_widen_the_median():
    rng = np.random.default_rng(7)
    intervals = [0.007 * rng.lognormal(0, 0.1, 10) for _ in range(9)] + [np.array([0.05])]
    numeric = _rows(intervals)
    assert quantile_range(numeric, "ttft_p50", np.ones(10, bool)) == (0.005, 0.01)
    # ... while P99 can be that request: 1 of 91 is above the 99th percentile's rank.
    assert quantile_range(numeric, "ttft_p99", np.ones(10, bool))[1] == 0.06
    without = {k: v for k, v in numeric.items() if k != "ttft_count"}
    assert quantile_range(without, "ttft_p50", np.ones(10, bool)) == (0.005, 0.06)
