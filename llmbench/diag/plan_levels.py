"""A run's levels as the planner simulates them: the sweep's own spec (llmbench/sweep/spec.py) and
loadgen's own workloads and arrival plans, so a prediction and its measurement share one specification."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

from analyzers.diagnosis_error import DiagnosisError
from analyzers.plan.predict import LevelLoad
from analyzers.plan.simulate import LengthsFn, random_prompt
from analyzers.plan.sweep_prediction import LevelInput
from analyzers.plan.window import WindowSizing
from llmbench.sweep.spec import SweepSpec
from loadgen.arrivals import ArrivalPlan
from loadgen.sizing import ANNOUNCE_LEAD_S
from loadgen.specs import LevelSpec
from loadgen.workloads import level_workload_factory
from rundir import SweepInfo, WorkloadSpec


def _lengths(level: LevelSpec, workload: WorkloadSpec) -> LengthsFn:
    wl = level_workload_factory(**workload.options())(level)

    def lengths(i: int) -> tuple[list[int], int]:
        spec = wl.spec(i)
        if isinstance(spec.prompt, list):
            return list(spec.prompt), spec.max_tokens
        n_in = spec.client_prompt_tokens or spec.target_input_len or level.input_len
        return random_prompt(n_in, level.seed, i), spec.max_tokens

    return lengths


def _arrivals(level: LevelSpec, workload: WorkloadSpec) -> Callable[[], Iterator[float] | None]:
    """The level's send times: none (closed loop), a trace's own (its requests' arrival_s, as the
    pacer sends them), or loadgen's arrival plan at the level's rate."""

    def make() -> Iterator[float] | None:
        if level.request_rate is None:
            return None
        if workload.kind == "trace":
            wl = level_workload_factory(**workload.options())(level)
            return (spec.arrival_s or 0.0 for spec in wl)
        per_worker = level.request_rate / level.workers
        return heapq.merge(
            *(
                ArrivalPlan(per_worker, level.burstiness, seed=level.seed, stream=k).times(0.0)
                for k in range(level.workers)
            )
        )

    return make


def planned_levels(sweep: SweepInfo, overrides: dict | None = None) -> list[LevelInput]:
    """Every level of the sweep; `overrides` replaces sweep fields (concurrency, input_lens, ...)."""
    try:
        spec = SweepSpec.of(sweep)
        for key, value in (overrides or {}).items():
            setattr(spec, key, value)
        spec.__post_init__()
    except ValueError as exc:
        raise DiagnosisError(f"the sweep's spec: {exc}") from None
    out = []
    for lv in spec.levels():
        load = LevelLoad(
            level_id=lv.level_id,
            warmup_s=lv.warmup_s,
            duration_s=lv.duration_s,
            concurrency=lv.concurrency,
            request_rate=lv.request_rate,
            sizing=WindowSizing(lv.steady_warmup, lv.sample_target, lv.max_duration_s, ANNOUNCE_LEAD_S),
            keep_load=lv.drain == "keep_load",
        )
        out.append(LevelInput(load, _lengths(lv, sweep.workload), _arrivals(lv, sweep.workload)))
    return out
