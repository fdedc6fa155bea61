"""DecodeAttentionCost: what one decode attention call costs, by the things it does (docs/planning.md).

A decode call for a batch of sequences reads each sequence's K and V from the paged cache (KV
elements: 2 x context x KV heads x head dim), takes, for every query head, a dot product with each
key and a weighted sum of the values (query elements: context x heads x head dim), and pays per
score (context x heads: the softmax, each dot product's setup). Under grouped-query attention the
first two differ by the group size, so one price per KV element, measured at one GQA ratio,
over-prices a model without GQA and under-prices one with wider groups; a short head dim pays the
per-score cost over fewer elements. Prices calibrated at layouts that differ in GQA ratio and head
dim carry to other layouts:

    seconds = fixed + (kv x KV elements + query x query elements + score x scores) / speedup
    speedup = 1 + (threads - 1) x split_efficiency

`threads` is what refengine's CPU decode kernel uses for the call: one per `split_bytes` of context
read (refengine/kernels/cpu_paged_decode.py's rule), at most the rank's threads; `split_bytes` 0
means the call's time does not split that way (the torch path, an older profile). An older
profile's single price per KV element reads as the KV price alone.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass

import numpy as np

from analyzers.diagnosis_error import DiagnosisError


@dataclass(frozen=True)
class DecodeCall:
    """One measured call: its KV elements, query elements and scores, its threads and seconds."""

    kv_elements: float
    query_elements: float
    scores: float
    threads: int
    seconds: float


@dataclass(frozen=True)
class DecodeAttentionCost:
    fixed_s: float
    per_kv_element_s: float
    per_query_element_s: float = 0.0
    per_score_s: float = 0.0
    split_bytes: int = 0  # context bytes per thread before a call splits (0: it does not)
    split_efficiency: float = 1.0  # what each thread beyond the first adds to the speed, measured
    element_bytes: int = 4  # the cache's element size, for the split rule
    lo: float = 0.0  # the measured range of KV elements per call
    hi: float = math.inf

    def __post_init__(self) -> None:
        prices = (self.fixed_s, self.per_kv_element_s, self.per_query_element_s, self.per_score_s)
        if min(prices) < 0 or self.split_bytes < 0 or not 0 < self.split_efficiency <= 1:
            raise DiagnosisError(
                f"a decode attention cost needs prices >= 0 and split efficiency in (0, 1], got {self}"
            )
        if self.element_bytes not in (1, 2, 4) or self.lo > self.hi:
            raise DiagnosisError(f"a decode attention cost needs a 1-, 2- or 4-byte cache and lo <= hi, got {self}")

    def threads_for(self, kv_elements: float, threads: int) -> int:
        """The threads a call reading `kv_elements` runs on, given the rank's `threads` (0: unknown)."""
        if self.split_bytes <= 0 or threads <= 1:
            return 1
        return max(1, min(threads, int(kv_elements * self.element_bytes) // self.split_bytes))

    def work_s(self, kv_elements: float, query_elements: float, scores: float) -> float:
        """The call's time beyond the fixed part on one thread."""
        return (
            self.per_kv_element_s * kv_elements + self.per_query_element_s * query_elements + self.per_score_s * scores
        )

    def seconds(
        self, kv_elements: float, query_elements: float, scores: float, threads: int, notes: set[str] | None = None
    ) -> float:
        if notes is not None and kv_elements > self.hi * 1.001:
            notes.add(f"decode attention KV elements beyond the measured {self.hi:,.0f} (extrapolated linearly)")
        n = self.threads_for(kv_elements, threads)
        return self.fixed_s + self.work_s(kv_elements, query_elements, scores) / (1 + (n - 1) * self.split_efficiency)

    @classmethod
    def fit(cls, calls: list[DecodeCall], split_bytes: int, element_bytes: int = 4) -> "DecodeAttentionCost":
        """The prices from the one-thread calls: least squares in relative error (each call over its own
        time, so a one-sequence call counts as much as a 64-sequence one), every price >= 0 (the best fit
        over the subsets of terms whose prices come out non-negative: exact for four terms). The split
        efficiency from the calls that split: the median of what each extra thread added."""
        single = [c for c in calls if c.threads == 1]
        if len(single) < 4 or min(c.seconds for c in calls) <= 0:
            raise DiagnosisError("a decode attention fit needs at least four one-thread calls with positive times")
        rows = np.array([[1.0, c.kv_elements, c.query_elements, c.scores] for c in single]) / np.array(
            [[c.seconds] for c in single]
        )
        best, best_residual = np.zeros(4), math.inf
        for k in (1, 2, 3, 4):
            for terms in itertools.combinations(range(4), k):
                coef = _least_squares(rows[:, terms])
                if coef is None or coef.min() < 0:
                    continue
                full = np.zeros(4)
                full[list(terms)] = coef
                residual = float(((rows @ full - 1.0) ** 2).sum())
                if residual < best_residual:
                    best, best_residual = full, residual
        fixed, per_kv, per_query, per_score = (float(x) for x in best)
        one = cls(fixed, per_kv, per_query, per_score, split_bytes=split_bytes, element_bytes=element_bytes)
        gains = [
            (one.work_s(c.kv_elements, c.query_elements, c.scores) / (c.seconds - one.fixed_s) - 1) / (c.threads - 1)
            for c in calls
            if c.threads > 1 and c.seconds > one.fixed_s
        ]
        efficiency = min(1.0, max(0.05, statistics.median(gains))) if gains else 1.0
        kvs = [c.kv_elements for c in calls]
        return cls(fixed, per_kv, per_query, per_score, split_bytes, efficiency, element_bytes, min(kvs), max(kvs))

    @classmethod
    def from_dict(cls, d: dict) -> "DecodeAttentionCost":
        """A profile's entry; an older profile's LinearCost by KV elements (fixed_s, per_unit_s) too."""
        if "per_unit_s" in d:
            return cls(d["fixed_s"], d["per_unit_s"], lo=d.get("lo", 0.0), hi=d.get("hi", math.inf))
        return cls(**d)


def _least_squares(a: np.ndarray) -> np.ndarray | None:
    """argmin |A x - 1|, the columns scaled to unit norm first (a call's 1/seconds and its elements per
    second differ by nine orders of magnitude); None where a column is all zero."""
    norms = np.linalg.norm(a, axis=0)
    if not np.all(norms > 0):
        return None
    x, *_ = np.linalg.lstsq(a / norms, np.ones(len(a)), rcond=None)
    return x / norms
