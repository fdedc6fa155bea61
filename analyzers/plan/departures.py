"""A run's levels held against what a machine profile predicts of them (prediction.json), and the
levels that depart from the prediction by more than the model's own error: data here, words in
reports/prediction_words.py.

A departure is measured / predicted - 1 for latencies ("TPOT P50 +40%": 40% above the prediction)
and for throughput alike ("output tok/s -30%": 30% below); slower than predicted is TPOT above,
throughput below.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from analyzers.stats.latency import LevelStats
from analyzers.validity import INVALID_PREFIX
from rundir.prediction import PREDICTED_METRICS, PredictionRecord

# The model's error band: how far a healthy run's level may sit from its prediction before something
# outside the model is the better explanation. From bench/RESULTS.md, "bench/departure_bands.py": over
# four plan-bench runs of 2026-12-05 and -06 (317 levels under the bench's calibrated profile, 251 held out
# under profiles fitted to the same runs), the P99 of |ln(measured / predicted)| read as a band, the
# larger of the two profiles' and rounded up to the next 10%: TTFT P50 136%, TPOT P50 81%, output
# tok/s 95%. The 50% bands before them (TPOT P50 and tok/s) left 7.9% of the calibrated profile's
# healthy levels beyond on TPOT P50, and a false finding in 4 of 33 healthy closed-loop sweeps under
# either profile; these, 1 and 0 of 33.
DEPARTURE_BAND = {"ttft_p50_s": 1.4, "tpot_p50_s": 0.9, "output_tok_s": 1.0}
# No finding for the tails, shown with their departure only: TTFT P99 (a healthy level reaches 3.3x
# or 1/3.3 of its prediction one time in a hundred) and TPOT P95 (the virtual clock's steps wander
# only as the run's concurrency-1 level did, a busy machine's more).
LATENCY_METRICS = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p95_s")


@dataclass
class MetricCheck:
    metric: str  # one of rundir.prediction.PREDICTED_METRICS
    predicted: float | None
    measured: float | None
    departure: float | None  # measured / predicted - 1; None where either is missing or zero
    band: float | None  # DEPARTURE_BAND's, None: this metric is shown, never a finding
    beyond: bool  # outside the band (either way)
    slower: bool | None  # the measurement is slower than predicted (None: no departure)


@dataclass
class LevelCheck:
    level_id: str
    concurrency: int | None
    request_rate: float | None
    checks: list[MetricCheck]
    measured: bool  # the level measured something (requests in its window)
    invalid: bool  # the level is no valid measurement (its notes say why)
    predicted_notes: list[str] = field(default_factory=list)

    def check(self, metric: str) -> MetricCheck:
        return next(c for c in self.checks if c.metric == metric)


@dataclass
class Departure:
    """A level whose measurement departs from the prediction beyond the band: a finding."""

    level_id: str
    concurrency: int | None
    request_rate: float | None
    metric: str
    predicted: float
    measured: float
    departure: float
    band: float
    slower: bool
    invalid: bool  # the level itself is no valid measurement: the client may be the cause


@dataclass
class PredictionCheck:
    profile_name: str
    profile_source: str
    profile_host: str
    scope: str  # rundir.prediction.PROFILE_SCOPES
    levels: list[LevelCheck]
    departures: list[Departure]
    not_predicted: list[str]  # measured levels the prediction has no row for
    notes: list[str]  # the prediction's own (extrapolations, the engine's defaults)
    fitted_here: bool = False  # the profile was fitted to this very run: agreement is the fit's
    bands: dict[str, float] = field(default_factory=lambda: dict(DEPARTURE_BAND))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _departure(metric: str, predicted: float | None, measured: float | None) -> MetricCheck:
    band = DEPARTURE_BAND.get(metric)
    if (
        predicted is None
        or measured is None
        or predicted <= 0
        or measured <= 0
        or not math.isfinite(predicted)
        or not math.isfinite(measured)
    ):
        return MetricCheck(metric, predicted, measured, None, band, False, None)
    ratio = measured / predicted
    slower = ratio > 1 if metric in LATENCY_METRICS else ratio < 1
    beyond = band is not None and (ratio > 1 + band or ratio < 1 / (1 + band))
    return MetricCheck(metric, predicted, measured, ratio - 1, band, beyond, slower if ratio != 1 else None)


def _measured(lv: LevelStats) -> dict[str, float | None]:
    return {
        "ttft_p50_s": lv.ttft.p.get("p50"),
        "ttft_p99_s": lv.ttft.p.get("p99"),
        "tpot_p50_s": lv.tpot.p.get("p50"),
        "tpot_p95_s": lv.tpot.p.get("p95"),
        "output_tok_s": lv.steady_output_tok_s,
    }


def check_prediction(record: PredictionRecord, levels: list[LevelStats], run_id: str = "") -> PredictionCheck:
    """Each measured level beside its prediction; the departures beyond the band, in level order. A
    profile of another machine than the one that ran the embedded engine predicts that machine, not
    this run: its departures are shown per metric and none is a finding."""
    rows, departures, missing = [], [], []
    for lv in levels:
        pred = record.level(lv.level_id)
        if pred is None:
            missing.append(lv.level_id)
            continue
        measured = _measured(lv)
        checks = [_departure(k, pred.metrics()[k], measured[k]) for k in PREDICTED_METRICS]
        invalid = any(n.startswith(INVALID_PREFIX) for n in lv.notes)
        rows.append(
            LevelCheck(
                lv.level_id, lv.concurrency, lv.request_rate, checks, lv.n_in_window > 0, invalid, list(pred.notes)
            )
        )
        for c in checks:
            if (
                c.beyond
                and lv.n_in_window > 0
                and record.scope != "other_machine"
                and c.predicted is not None
                and c.measured is not None
                and c.departure is not None
            ):
                departures.append(
                    Departure(
                        lv.level_id,
                        lv.concurrency,
                        lv.request_rate,
                        c.metric,
                        c.predicted,
                        c.measured,
                        c.departure,
                        c.band or 0.0,
                        bool(c.slower),
                        invalid,
                    )
                )
    # analyzers/plan/fit/'s own words for a profile fitted to a run
    fitted_here = (
        record.profile.source == "fitted"
        and bool(run_id)
        and any(a.startswith(f"fitted to run {run_id} (") for a in record.profile.assumptions)
    )
    return PredictionCheck(
        record.profile.name,
        record.profile.source,
        record.profile.host,
        record.scope,
        rows,
        departures,
        missing,
        list(record.notes),
        fitted_here,
    )
