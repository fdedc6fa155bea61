"""Differential diagnosis: what each request lived through, and what separates the tail from the body.

A spike window is a view of the tail; it is not what decides whether a condition explains it. For
a candidate condition (other processes holding a core, a long prefill pending when the request
arrived, ...) every measured request gets an exposure, yes or no: for a condition in time, whether
it held for at least EXPOSED_SHARE of the request's own latency window; for a condition of the
request, whether the request had it. The tail (requests above their level's P90) is then set
against the body (the rest of the level):

- tail_exposed, body_exposed: the share of each that lived through the condition;
- relative_risk: how much likelier an exposed request is to be in the tail than an unexposed one;
- attributable: the share of the tail the condition explains: the share of the tail's excess latency
  (above each level's median) that exposed tail requests carry, x (RR - 1) / RR (the attributable
  fraction among cases). Weighting by the excess counts a 400 ms outlier for more than a request
  just over the P90, as the P99 does. A condition that tail and body share (RR near 1) explains
  none of it, however common it is: it is context;
- effect: exposed requests' latency over their level's unexposed median (the median ratio);
- counterfactual: the level's percentile over its unexposed requests against all of them ("without
  the 7 s when other processes held a core, TTFT P99 would be 35 ms instead of 64 ms").

A condition separates tail from body when it explains at least MIN_ATTRIBUTABLE of a tail of at
least MIN_TAIL requests, with RR >= MIN_RISK and an effect >= MIN_EFFECT. The counterfactual is
evidence, not a gate: a level's P99 rests on its one or two slowest requests, and a condition that
explains most of its P90-and-up tail is the cause of the tail even where those two fall outside it. The same machinery serves
spiky and standing tails: a standing level's tail is its slowest requests, and the body its others.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from analyzers.triage.tail_windows import METRIC_SPANS, TAIL_QUANTILE, Window, merge
from rundir.table import RequestTable

EXPOSED_SHARE = 0.5  # a condition in time exposes a request that it covered this much of
MIN_TAIL = 3  # fewer tail requests than this prove nothing
MIN_ATTRIBUTABLE = 0.4  # explains at least this share of the tail ...
MIN_RISK = 2.0  # ... exposed requests are at least twice as likely to be in the tail ...
MIN_EFFECT = 1.3  # ... and at least 1.3x as slow as their level's unexposed median
MIN_UNEXPOSED = 5  # a level's counterfactual percentile needs this many unexposed requests


@dataclass
class Differential:
    n_tail: int
    n_body: int
    tail_exposed: float
    body_exposed: float
    excess_exposed: float  # share of the tail's latency above the median that exposed requests carry
    relative_risk: float
    attributable: float
    effect: float | None  # median of exposed latency / its level's unexposed median
    level_id: str | None  # the level the counterfactual is stated for
    quantile: float  # 99: the percentile of the counterfactual
    with_s: float | None  # that level's percentile over all its requests
    without_s: float | None  # ... over its unexposed requests
    exposed_tail_rows: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=int))

    @property
    def concentrates(self) -> bool:
        """The tail concentrates on the exposed requests (every gate but the effect's): a condition that
        slows only some of its requests (a replica's own queue) may leave its median request as fast."""
        return self.n_tail >= MIN_TAIL and self.attributable >= MIN_ATTRIBUTABLE and self.relative_risk >= MIN_RISK

    @property
    def separates(self) -> bool:
        return self.concentrates and (self.effect or 0.0) >= MIN_EFFECT

    def evidence(self) -> dict:
        return dict(
            tail_requests=self.n_tail,
            body_requests=self.n_body,
            tail_exposed=round(self.tail_exposed, 3),
            body_exposed=round(self.body_exposed, 3),
            tail_excess_exposed=round(self.excess_exposed, 3),
            relative_risk=round(self.relative_risk, 2),
            tail_explained=round(self.attributable, 3),
            exposed_latency_vs_unexposed=None if self.effect is None else round(self.effect, 2),
            counterfactual_level=self.level_id,
            counterfactual_quantile=self.quantile,
            percentile_with_s=self.with_s,
            percentile_without_s=self.without_s,
        )

    def words(self, metric: str, condition: str, lived: str = "lived through it") -> str:
        """'9 of the 11 slowest TTFTs (over each level's P90) lived through it, 93% of their latency above
        the median, vs 4% of the other requests; without <condition>, c4's TTFT P99 would be 35 ms
        instead of 64 ms'."""
        n = round(self.tail_exposed * self.n_tail)
        out = (
            f"{n} of the {self.n_tail} slowest {metric.upper()}s (over each level's P90) {lived}, "
            f"{self.excess_exposed:.0%} of their latency above the median, vs {self.body_exposed:.0%} of the "
            "other requests"
        )
        if self.with_s is not None and self.without_s is not None:
            out += (
                f"; without {condition}, {self.level_id}'s {metric.upper()} P{self.quantile:g} would be "
                f"{_ms(self.without_s)} instead of {_ms(self.with_s)}"
            )
        return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def time_exposure(starts: np.ndarray, ends: np.ndarray, cond: list[Window]) -> np.ndarray:
    """For each request window [starts[i], ends[i]], the share of it that the condition's windows cover."""
    starts, ends = np.asarray(starts, float), np.asarray(ends, float)
    covered = np.zeros(starts.shape)
    for w in merge(cond, gap_s=0.0):
        covered += np.clip(np.minimum(ends, w.end) - np.maximum(starts, w.start), 0.0, None)
    length = ends - starts
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(length > 0, covered / length, 0.0)
    # A window of no length (a first token in the same instant) is exposed if the condition held then.
    point = length <= 0
    if point.any():
        for w in cond:
            share[point & (starts >= w.start) & (starts <= w.end)] = 1.0
    return np.clip(np.nan_to_num(share), 0.0, 1.0)


def differential(
    values: np.ndarray,
    rows_by_level: dict[str, np.ndarray],
    measured: np.ndarray,
    exposed: np.ndarray,
    quantile: float = 99.0,
) -> Differential:
    """Tail (above each level's TAIL_QUANTILE) against body on `exposed`, over the `measured` rows."""
    tail = np.zeros(values.shape, dtype=bool)
    body = np.zeros(values.shape, dtype=bool)
    excess = np.zeros(values.shape)  # latency above the level's median
    ratios: list[np.ndarray] = []
    best: tuple[int, str, float, float] | None = None  # (exposed tail count, level, with, without)
    for level_id, rows in rows_by_level.items():
        rows = rows[measured[rows]]
        if rows.size == 0:
            continue
        v = values[rows]
        cut = float(np.percentile(v, TAIL_QUANTILE))
        in_tail = v > cut
        tail[rows[in_tail]] = True
        excess[rows] = np.clip(v - float(np.median(v)), 0.0, None)
        body[rows[~in_tail]] = True
        e = exposed[rows]
        if (~e).sum() >= MIN_UNEXPOSED and e.any():
            base = float(np.median(v[~e]))
            if base > 0:
                ratios.append(v[e] / base)
            hits = int((in_tail & e).sum())
            if best is None or hits > best[0]:
                best = (hits, level_id, float(np.percentile(v, quantile)), float(np.percentile(v[~e], quantile)))
    n_tail, n_body = int(tail.sum()), int(body.sum())
    tail_exposed = float(exposed[tail].mean()) if n_tail else 0.0
    body_exposed = float(exposed[body].mean()) if n_body else 0.0
    risk = _relative_risk(tail, body, exposed)
    total_excess = float(excess[tail].sum())
    excess_exposed = float(excess[tail & exposed].sum()) / total_excess if total_excess > 0 else tail_exposed
    attributable = (
        excess_exposed * (risk - 1.0) / risk
        if risk > 1.0 and np.isfinite(risk)
        else (excess_exposed if risk == float("inf") else 0.0)
    )
    effect = float(np.median(np.concatenate(ratios))) if ratios else None
    best_level, with_s, without_s = (best[1], best[2], best[3]) if best else (None, None, None)
    return Differential(
        n_tail,
        n_body,
        tail_exposed,
        body_exposed,
        excess_exposed,
        risk,
        attributable,
        effect,
        best_level,
        quantile,
        with_s,
        without_s,
        np.flatnonzero(tail & exposed),
    )


def _relative_risk(tail: np.ndarray, body: np.ndarray, exposed: np.ndarray) -> float:
    group = tail | body
    e, u = group & exposed, group & ~exposed
    if not e.any():
        return 0.0
    if not u.any():
        return 1.0  # everyone lived through it: no contrast, nothing told apart
    risk_e = float(tail[e].mean())
    risk_u = float(tail[u].mean())
    if risk_u == 0.0:
        return float("inf") if risk_e > 0 else 0.0
    return risk_e / risk_u


def exposed_windows(starts: np.ndarray, ends: np.ndarray, rows: np.ndarray) -> list[Window]:
    """The merged latency windows of `rows`: what the report's timeline shades for a finding."""
    return merge(
        [
            Window(float(starts[i]), float(max(ends[i], starts[i])))
            for i in rows
            if np.isfinite(starts[i]) and np.isfinite(ends[i])
        ]
    )


@dataclass
class InTime:
    """A condition in time set against the requests of a run: its differential, and what a finding
    needs to name the requests and seconds it rests on."""

    diff: Differential
    seconds: float  # how long the condition held, merged
    windows: list[Window]  # the exposed tail requests' own latency windows (the timeline's shading)


def differential_in_time(
    table: RequestTable, metric: str, cond: list[Window], sure: list[Window] | None = None
) -> InTime | None:
    """The differential of a condition that held in `cond` (probe intervals, say): a request is
    exposed when the condition covered at least EXPOSED_SHARE of its own latency window. With `sure`
    (where it held for certain, inside `cond`: held_spans.py), the effect is read on the requests
    exposed there: `cond` is an estimate that may reach into the calm, whose fast requests would
    dilute how much the condition slows one. None when the condition never held."""
    if not cond:
        return None
    start_col, end_col, value_col = METRIC_SPANS[metric]
    df = table.df
    starts, ends = df[start_col].to_numpy(float), df[end_col].to_numpy(float)
    measured = (df["status"] == "ok").to_numpy() & df["in_window"].to_numpy() & df[value_col].notna().to_numpy()
    s0, e0 = np.nan_to_num(starts), np.nan_to_num(ends)
    values, rows = df[value_col].to_numpy(float), table.level_rows()
    exposed = time_exposure(s0, e0, cond) >= EXPOSED_SHARE
    diff = differential(values, rows, measured, exposed & measured)
    if sure:
        certain = time_exposure(s0, e0, sure) >= EXPOSED_SHARE
        if (certain & measured).any():
            diff = replace(diff, effect=differential(values, rows, measured, certain & measured).effect)
    seconds = float(sum(w.seconds for w in merge(cond, gap_s=0.0)))
    return InTime(diff, seconds, exposed_windows(starts, ends, diff.exposed_tail_rows))


def held_windows(start: np.ndarray, end: np.ndarray, held: np.ndarray) -> list[Window]:
    """The probe intervals [start, end] where `held` is True."""
    return [Window(float(a), float(b)) for a, b, h in zip(start, end, held) if h]
