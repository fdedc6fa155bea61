"""A level's predicted TTFT / TPOT percentiles and throughput, from simulations of it.

The statistics are the sweep's own definitions (docs/metrics.md): over the requests sent inside
the measured window, TTFT = first token - sent, TPOT = (E2E - TTFT) / (tokens - 1), percentiles
numpy-linear; output tokens/s counts the tokens that arrived inside the window. A level simulated
with several seeds pools their window requests and their windows (docs/planning.md, "Seeds").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

from analyzers.diagnosis_error import DiagnosisError
from analyzers.plan.simulate import LengthsFn, LoadSpec, SimResult, Simulator
from analyzers.plan.window import FIXED, WindowSizing
from analyzers.stats.distribution import MIN_SAMPLES_FOR_P99

METRICS = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p95_s", "output_tok_s")


@dataclass(frozen=True)
class LevelLoad:
    """One level of a sweep, as the simulator needs it (the face builds it from the sweep's spec)."""

    level_id: str
    warmup_s: float
    duration_s: float
    concurrency: int | None = None
    request_rate: float | None = None
    sizing: WindowSizing = FIXED  # the sweep's sizing of this level's warm-up and window
    keep_load: bool = True  # the load runs on after the window until its requests finish (LoadSpec.keep_load)

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.request_rate is None):
            raise DiagnosisError(f"level {self.level_id}: a concurrency or a request rate, not both")


@dataclass
class LevelPrediction:
    level_id: str
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    tpot_p95_s: float | None
    output_tok_s: float
    tpot_mean_s: float | None  # what throughput follows; the fit matches it to a run's (analyzers/plan/fit/)
    # Over every request the simulation finished, window or not: what the fit holds a level to when
    # the simulated window caught no request (a wave of long requests can straddle a short window).
    tpot_mean_all_s: float | None
    ttft_p50_all_s: float | None
    req_s: float
    n_requests: int  # window requests of one simulation (the mean of the pooled ones')
    mean_batch: float  # requests per step, averaged over the window's steps
    preemptions: int
    unfinished: int  # window requests still running when the simulation stopped
    notes: list[str] = field(default_factory=list)
    # The window's mean TTFT: what the fit holds the lightest level to where the time outside the
    # server is measured as a difference of means (analyzers/plan/fit/).
    ttft_mean_s: float | None = None
    # The window's mean prefill phase (first scheduled to first token): what the fit holds to the
    # server's own where the server publishes it (analyzers/plan/fit/).
    prefill_phase_mean_s: float | None = None

    def metrics(self) -> dict[str, float | None]:
        return {k: getattr(self, k) for k in METRICS}

    def to_dict(self) -> dict:
        return asdict(self)


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def summarize(level_id: str, result: SimResult | list[SimResult]) -> LevelPrediction:
    """One simulation's statistics, or several's pooled: every window's requests together, the rates
    over the windows' summed length, the per-step means averaged."""
    results = result if isinstance(result, list) else [result]
    if not results:
        raise ValueError("summarize needs at least one simulation")
    window = [r for res in results for r in res.in_window]
    ttft = [r.ttft_s for r in window if r.ttft_s is not None]
    tpot = [r.tpot_s for r in window if r.tpot_s is not None]
    span = sum(res.window[1] - res.window[0] for res in results)
    done = sum(
        1 for res in results for r in res.records if r.t_done is not None and res.window[0] <= r.t_done < res.window[1]
    )
    notes = sorted(set().union(*(res.notes for res in results)))
    pooled = f" (over {len(results)} simulations)" if len(results) > 1 else ""
    if len(window) < MIN_SAMPLES_FOR_P99:
        notes.append(
            f"{len(window)} simulated requests in the window{pooled}: its P99 rests on fewer than {MIN_SAMPLES_FOR_P99}"
        )
    finished = [r for res in results for r in res.records if r.t_done is not None]
    tpot_all = [r.tpot_s for r in finished if r.tpot_s is not None]
    ttft_all = [r.ttft_s for r in finished if r.ttft_s is not None]
    unfinished = sum(1 for r in window if r.t_done is None)
    prefill = [p for r in window if (p := r.prefill_phase_s) is not None]
    if unfinished:
        notes.append(
            f"{unfinished} window requests{pooled} unfinished when the simulation stopped: over capacity, and "
            "the percentiles leave them out (they are lower bounds)"
        )
    return LevelPrediction(
        level_id=level_id,
        ttft_p50_s=_pct(ttft, 50),
        ttft_p99_s=_pct(ttft, 99),
        tpot_p50_s=_pct(tpot, 50),
        tpot_p95_s=_pct(tpot, 95),
        output_tok_s=sum(res.tokens_in_window for res in results) / span,
        tpot_mean_s=float(np.mean(tpot)) if tpot else None,
        tpot_mean_all_s=float(np.mean(tpot_all)) if tpot_all else None,
        ttft_p50_all_s=_pct(ttft_all, 50),
        req_s=done / span,
        n_requests=round(len(window) / len(results)),  # a window's, as a run counts them
        mean_batch=float(np.mean([res.mean_batch for res in results])),
        preemptions=round(float(np.mean([res.preemptions for res in results]))),  # per simulation
        unfinished=unfinished,
        notes=notes,
        ttft_mean_s=float(np.mean(ttft)) if ttft else None,
        prefill_phase_mean_s=float(np.mean(prefill)) if prefill else None,
    )


def predict_level(
    sim: Simulator,
    level: LevelLoad,
    lengths: LengthsFn,
    arrivals: Callable[[], Iterator[float] | None] | None = None,
    seeds: int = 1,
) -> LevelPrediction:
    """Simulate the level with seeds 0 .. seeds - 1 and pool them; an open-loop level needs its
    arrival times (seconds from its start), a fresh iterator of them from `arrivals()` per seed."""
    if seeds < 1:
        raise DiagnosisError(f"seeds must be >= 1, not {seeds}")
    results = []
    for seed in range(seeds):
        times = arrivals() if arrivals is not None and level.concurrency is None else None
        if level.request_rate is not None and times is None:
            raise DiagnosisError(f"level {level.level_id}: an open-loop level needs its arrival times")
        load = LoadSpec(
            warmup_s=level.warmup_s,
            duration_s=level.duration_s,
            concurrency=level.concurrency,
            arrivals=times,
            seed=seed,
            sizing=level.sizing,
            keep_load=level.keep_load,
        )
        results.append(sim.run(load, lengths))
    return summarize(level.level_id, results)


def slo_met(ttft_p99_s: float | None, tpot_p95_s: float | None, slo_ttft_s: float, slo_tpot_s: float) -> bool:
    """TTFT P99 and TPOT P95 within their bounds (a level without TTFTs is not; one without TPOTs,
    every output a single token, meets the TPOT bound)."""
    return ttft_p99_s is not None and ttft_p99_s <= slo_ttft_s and (tpot_p95_s is None or tpot_p95_s <= slo_tpot_s)


def within_slo(pred: LevelPrediction, slo_ttft_s: float, slo_tpot_s: float) -> bool:
    return slo_met(pred.ttft_p99_s, pred.tpot_p95_s, slo_ttft_s, slo_tpot_s)


def relative_errors(predicted: dict[str, float | None], measured: dict[str, float | None]) -> dict[str, float | None]:
    """(predicted - measured) / measured per metric; None where either side is missing or zero."""
    out: dict[str, float | None] = {}
    for k in METRICS:
        p, m = predicted.get(k), measured.get(k)
        out[k] = None if p is None or m is None or m == 0 else (p - m) / m
    return out
