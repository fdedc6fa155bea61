"""Is a replica slower than the others at the same load, or only busier?

A replica that holds more requests is slower for it: each step of a continuous-batching engine
carries more sequences, and past its KV cache new requests wait. So the question is asked at the
load each request met: for every request the candidate served, the others' latency at the same
number of requests in flight on their own replica when sent (load_at_send.py). Where the others
had that load often enough (MIN_AT_LOAD requests), their median at it; beyond what they ever
carried, their trend: a straight line through their per-load medians (weighted by how many
requests each rests on), which is how a batch's step time grows until a replica runs out of room,
the very thing a hot replica does sooner. The candidate's slowness is the median of its latencies
over those expectations: about 1 for a replica merely busier, well above it for one that is slow.

A closed loop makes the slow replica collect the users (their requests stay there longest), so its
load and the others' often do not overlap at all: the trend is what makes the comparison possible
then, and `matched_share` says how much of it rested on loads the others really had. The trend
assumes the others would have fared on it; a replica handed heavier requests than the others may
have run out of room where they never went, so for it only loads the others had count
(hot_replica.py decides which).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_AT_LOAD = 3  # the others' median at a load needs this many of their requests
MIN_LOADS = 2  # ... and a trend needs this many loads that have it


@dataclass(frozen=True)
class SameLoad:
    ratio: float  # median of the candidate's latency over the others' at its load
    matched_share: float  # of its requests compared at loads the others had (the rest: on their trend)
    its_in_flight: float  # median requests in flight on it when its requests were sent
    others_in_flight: float
    its_median_s: float
    others_median_s: float

    def __post_init__(self) -> None:
        if not self.ratio > 0 or not 0.0 <= self.matched_share <= 1.0:
            raise ValueError(f"ratio {self.ratio} must be positive and matched share {self.matched_share} a share")

    def evidence(self) -> dict:
        return {
            "latency_vs_others_same_load": round(self.ratio, 2),
            "same_load_matched_share": round(self.matched_share, 3),
            "in_flight_median": self.its_in_flight,
            "others_in_flight_median": self.others_in_flight,
            "latency_median_s": self.its_median_s,
            "others_latency_median_s": self.others_median_s,
        }


def same_load(
    values: np.ndarray, in_flight: np.ndarray, mine: np.ndarray, others: np.ndarray, extrapolate: bool = True
) -> SameLoad | None:
    """The candidate's (`mine`) latency against the `others` rows' at the same in-flight count; None
    when the others' loads give neither a median at its loads nor a trend to read them on. Without
    `extrapolate`, only loads the others had count (the trend is not read beyond them)."""
    if not mine.any() or not others.any():
        return None
    loads, medians, counts = _per_load(values[others], in_flight[others])
    held = counts >= MIN_AT_LOAD
    if not held.any():
        return None
    at = dict(zip(loads[held], medians[held]))
    trend = _line(loads[held], medians[held], counts[held]) if extrapolate and held.sum() >= MIN_LOADS else None
    mine_loads, mine_values = in_flight[mine], values[mine]
    expected = np.array([at.get(n, np.nan) for n in mine_loads])
    matched = np.isfinite(expected)
    if trend is not None:
        a, b = trend
        expected = np.where(matched, expected, np.maximum(a + b * mine_loads, 0.0))
    usable = np.isfinite(expected) & (expected > 0)
    if not usable.any():
        return None
    ratio = float(np.median(mine_values[usable] / expected[usable]))
    return SameLoad(
        ratio,
        float(matched.mean()),
        float(np.median(mine_loads)),
        float(np.median(in_flight[others])),
        float(np.median(mine_values)),
        float(np.median(values[others])),
    )


def _per_load(values: np.ndarray, loads: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    keys, inverse, counts = np.unique(loads, return_inverse=True, return_counts=True)
    medians = np.array([float(np.median(values[inverse == k])) for k in range(keys.size)])
    return keys, medians, counts


def _line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Weighted least squares y = a + b x; a trend never falls with load (b >= 0)."""
    w = w.astype(float)
    xm, ym = float(np.average(x, weights=w)), float(np.average(y, weights=w))
    var = float(np.average((x - xm) ** 2, weights=w))
    b = float(np.average((x - xm) * (y - ym), weights=w)) / var if var > 0 else 0.0
    b = max(b, 0.0)
    return ym - b * xm, b
