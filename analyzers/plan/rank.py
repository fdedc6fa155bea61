"""Parallel plans ranked on predicted goodput at a target load (docs/planning.md).

Each feasible candidate (analyzers/plan/parallel.py: memory and communication) is simulated as one
replica: the target load split evenly over the replicas (a closed loop of ceil(concurrency /
replicas) users, or an open loop at rate / replicas), its KV blocks from the memory model, its TP
collectives at the bandwidth its TP group sees, refengine's scheduler with the given engine
arguments. Its window is sized the way the sweep sizes a level: a closed loop warms up until every
user has finished a request, and the window runs until it holds the requests a P99 needs
(MIN_SAMPLES_FOR_P99), each bounded; a fixed minute left a P99 on 70 requests where each lasts seconds.
Goodput is the requests per second, over all replicas, whose TTFT and TPOT both met the SLO; plans
rank by it (ties: the memory ranking's order).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from dataclasses import dataclass

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.presets import ModelShape
from analyzers.plan.engine_config import pipeline_depth
from analyzers.plan.parallel import Candidate, Cluster
from analyzers.plan.predict import LevelPrediction, summarize, within_slo
from analyzers.plan.profile import CollectiveCost, MachineProfile
from analyzers.plan.simulate import LoadSpec, Simulator, random_prompt
from analyzers.plan.step_model import StepModel
from analyzers.plan.window import WindowSizing
from analyzers.stats.distribution import MIN_SAMPLES_FOR_P99
from refengine.config import CacheConfig, EngineArgs


@dataclass(frozen=True)
class TargetLoad:
    input_len: int
    output_len: int
    concurrency: int | None = None
    request_rate: float | None = None
    warmup_s: float = 20.0  # at least; a closed loop's warm-up lasts until every user has finished a request
    duration_s: float = 60.0  # at least; the window lasts until it holds MIN_SAMPLES_FOR_P99 requests
    max_duration_s: float = 600.0  # the bound of the warm-up and of the window (each), simulated seconds

    @property
    def sizing(self) -> WindowSizing:
        return WindowSizing(
            steady_warmup=self.concurrency is not None,
            sample_target=MIN_SAMPLES_FOR_P99,
            max_duration_s=self.max_duration_s,
        )

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.request_rate is None):
            raise DiagnosisError("the target load is a concurrency or a request rate")
        if self.input_len < 1 or self.output_len < 1:
            raise DiagnosisError("input and output lengths must be >= 1")
        if not 0 < self.duration_s <= self.max_duration_s or not 0 <= self.warmup_s <= self.max_duration_s:
            raise DiagnosisError("the warm-up and the window must lie within max_duration_s")


@dataclass
class RankedPlan:
    candidate: Candidate
    variation: str  # the engine arguments changed (--what-if), "" for the baseline
    prediction: LevelPrediction
    goodput_req_s: float  # all replicas
    output_tok_s: float  # all replicas
    slo_met: bool  # TTFT P99 and TPOT P95 within the SLO


def _replica_profile(profile: MachineProfile, cluster: Cluster, c: Candidate) -> MachineProfile:
    if not c.tp_crosses_nodes:
        return profile
    return dataclasses.replace(
        profile, collective=CollectiveCost(profile.collective.latency_s, cluster.inter_node_gbps * 1e9)
    )


def replica_simulator(
    shape: ModelShape, cluster: Cluster, c: Candidate, profile: MachineProfile, args: EngineArgs
) -> Simulator:
    """One replica of the plan: its KV blocks from the memory model, its TP collectives at the bandwidth its
    TP group sees, refengine's scheduler with the engine arguments."""
    sched = args.scheduler_config(c.estimate.plan.max_model_len)
    layout = dataclasses.replace(args, tensor_parallel_size=c.tp, pipeline_parallel_size=c.pp)
    depth, _ = pipeline_depth(layout, profile.device_type)
    cache = CacheConfig(
        block_size=c.estimate.plan.block_size,
        num_blocks=max(1, c.estimate.num_blocks),
        enable_prefix_caching=args.enable_prefix_caching,
    )
    return Simulator(
        StepModel(
            shape,
            _replica_profile(profile, cluster, c),
            c.tp,
            c.pp,
            weight_bytes=c.estimate.plan.weight_bytes,
            ranks_per_host=min(c.tp * c.pp, cluster.gpus_per_node),
        ),
        sched,
        cache,
        profile.request_overhead,
        batches_in_flight=depth,
    )


def rank_by_goodput(
    shape: ModelShape,
    cluster: Cluster,
    candidates: list[Candidate],
    profile: MachineProfile,
    args: EngineArgs,
    load: TargetLoad,
    slo_ttft_s: float,
    slo_tpot_s: float,
    variation: str = "",
) -> list[RankedPlan]:
    out = []
    for c in candidates:
        sim = replica_simulator(shape, cluster, c, profile, args)
        users = None if load.concurrency is None else max(1, math.ceil(load.concurrency / c.replicas))
        rate = None if load.request_rate is None else load.request_rate / c.replicas
        arrivals = None if rate is None else _poisson(rate)
        result = sim.run(
            LoadSpec(load.warmup_s, load.duration_s, concurrency=users, arrivals=arrivals, sizing=load.sizing),
            lambda i: (random_prompt(load.input_len, 0, i), load.output_len),
        )
        pred = summarize(c.label, result)
        window_s = result.window[1] - result.window[0]
        good = sum(
            1
            for r in result.in_window
            if r.ttft_s is not None and r.ttft_s <= slo_ttft_s and (r.tpot_s is None or r.tpot_s <= slo_tpot_s)
        )
        met = within_slo(pred, slo_ttft_s, slo_tpot_s)
        out.append(RankedPlan(c, variation, pred, good / window_s * c.replicas, pred.output_tok_s * c.replicas, met))
    order = {id(c): i for i, c in enumerate(candidates)}
    return sorted(out, key=lambda p: (-p.goodput_req_s, order[id(p.candidate)]))


def _poisson(rate: float):
    rng = random.Random(f"plan-rank/{rate}")
    return itertools.accumulate(rng.expovariate(rate) for _ in itertools.count())
