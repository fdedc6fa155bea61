"""How many replicas a target request rate needs within the SLO, per balancing policy (docs/planning.md,
"A fleet").

A fleet of N serves a rate when its prediction at that offered rate (analyzers/plan/fleet.py: one
Poisson stream routed by the policy) has its TTFT P99 and TPOT P95, pooled over every request the
replicas served, within the SLO, and no window request left unfinished (over capacity). That is the
capacity search's criterion (analyzers/capacity/answer.py), not "goodput >= rate": goodput counts the
requests that met both bounds one by one, and at a TPOT P95 bound up to 5% may miss, so goodput sits
below the offered rate even where the SLO holds.

- One replica's capacity: the highest Poisson rate one replica alone serves within the SLO: from its
  throughput with every seat taken, halved until a rate meets the SLO (doubled until one misses, when
  that one already meets it: an open loop can outrun a closed loop's turnover), then geometric
  bisection to `CAPACITY_RESOLUTION` (10%).
- Replicas needed under a policy: the fewest N that serve the target rate. The search starts at an
  estimate (the target over one replica's capacity, or another policy's count), steps down while N - 1
  still serves it and up while N does not, up to `max_replicas`; the count it returns served the rate
  and one fewer did not, both simulated. A simulation is not exactly monotone in N (each N routes the
  same stream differently), so a count below a failing one is never tried.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from analyzers.diagnosis_error import DiagnosisError
from analyzers.plan.fleet import FLEET_POLICIES, FleetLoad, FleetResult, simulate_fleet
from analyzers.plan.predict import summarize, within_slo
from analyzers.plan.simulate import LengthsFn, LoadSpec, Simulator

CAPACITY_RESOLUTION = 0.10


@dataclass(frozen=True)
class SizingSpec:
    """What a fleet is sized for: a rate within an SLO, its simulated window, the search's bounds."""

    target_rate: float
    slo_ttft_s: float
    slo_tpot_s: float
    max_replicas: int  # the search's bound: least-outstanding's cost grows with it
    # Shorter than a level's 20 s + 60 s: a replica fills in seconds, and at hundreds of requests/s a 20 s
    # window holds thousands (docs/planning.md, "A fleet").
    warmup_s: float = 5.0
    duration_s: float = 20.0
    round_robin_sample: int = 1  # round-robin replicas simulated (exact in distribution, fleet.py)

    def __post_init__(self) -> None:
        if not self.target_rate > 0:
            raise DiagnosisError(f"the target rate must be > 0 requests/s, got {self.target_rate:g}")
        if self.max_replicas < 1 or self.round_robin_sample < 1:
            raise DiagnosisError("--max-replicas and the round-robin sample are >= 1")

    def load(self, rate: float) -> FleetLoad:
        return FleetLoad(rate, self.warmup_s, self.duration_s, stop_past_ttft_s=self.slo_ttft_s)


@dataclass
class ReplicaCapacity:
    """One replica alone (no router): the highest rate it serves within the SLO."""

    rate: float | None  # None: not even the lowest rate tried
    lowest_miss: float | None  # the lowest rate tried that missed
    saturated_req_s: float  # its throughput with every seat taken (the bracket's top)
    tried: dict[float, bool] = field(default_factory=dict)


@dataclass
class PolicyCount:
    policy: str
    replicas: int | None  # None: more than max_replicas
    at: FleetResult | None  # the fleet at that count
    below: FleetResult | None  # at one fewer (None at one replica, or beyond the bound)
    tried: dict[int, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.policy not in FLEET_POLICIES:
            raise ValueError(f"policy {self.policy!r} is not one of {FLEET_POLICIES}")
        if self.replicas is not None and (not self.tried.get(self.replicas) or self.tried.get(self.replicas - 1)):
            raise ValueError(f"{self.replicas} replicas must serve the rate and one fewer must not: {self.tried}")


@dataclass
class FleetSizing:
    spec: SizingSpec
    gpus_per_replica: int
    one_replica: ReplicaCapacity
    counts: list[PolicyCount]  # the policy asked for first

    def gpus(self, count: PolicyCount) -> int | None:
        return None if count.replicas is None else count.replicas * self.gpus_per_replica


def serves(fleet: FleetResult, spec: SizingSpec) -> bool:
    if fleet.stopped_early:
        return False
    pred = fleet.prediction
    return pred.n_requests > 0 and pred.unfinished == 0 and within_slo(pred, spec.slo_ttft_s, spec.slo_tpot_s)


def one_replica_capacity(make_sim: Callable[[], Simulator], lengths: LengthsFn, spec: SizingSpec) -> ReplicaCapacity:
    """Bracket from the saturated throughput (halving, or doubling when it meets), then bisect to 10%."""
    seats = make_sim().scheduler_config.max_num_seqs
    saturated = summarize(
        "saturated", make_sim().run(LoadSpec(spec.warmup_s, spec.duration_s, concurrency=2 * seats), lengths)
    ).req_s
    if not saturated > 0:
        raise DiagnosisError("one replica finished no request in the simulated window: it cannot serve this load")
    tried: dict[float, bool] = {}

    def met(rate: float) -> bool:
        if rate not in tried:
            tried[rate] = serves(simulate_fleet(make_sim, "round-robin", 1, spec.load(rate), lengths), spec)
        return tried[rate]

    lo: float | None = None
    miss: float | None = None
    rate = saturated
    for _ in range(7):  # halve until a rate meets it
        if met(rate):
            lo = rate
            break
        miss, rate = rate, rate / 2
    if lo is None:
        return ReplicaCapacity(None, min(tried), saturated, tried)
    for _ in range(6 if miss is None else 0):  # met at saturation: double until a rate misses it
        if not met(2 * lo):
            miss = 2 * lo
            break
        lo *= 2
    if miss is None:
        return ReplicaCapacity(lo, None, saturated, tried)
    while miss / lo > 1 + CAPACITY_RESOLUTION:
        mid = math.sqrt(lo * miss)
        lo, miss = (mid, miss) if met(mid) else (lo, mid)
    return ReplicaCapacity(lo, miss, saturated, tried)


def fewest(meets: Callable[[int], bool], start: int, max_replicas: int) -> tuple[int | None, dict[int, bool]]:
    """The fewest N in [1, max_replicas] with meets(N) and not meets(N - 1), stepping from `start`."""
    tried: dict[int, bool] = {}

    def m(n: int) -> bool:
        if n not in tried:
            tried[n] = meets(n)
        return tried[n]

    n = min(max(1, start), max_replicas)
    if m(n):
        while n > 1 and m(n - 1):
            n -= 1
        return n, tried
    while n < max_replicas:
        n += 1
        if m(n):
            return n, tried
    return None, tried


def replicas_needed(
    make_sim: Callable[[], Simulator], lengths: LengthsFn, spec: SizingSpec, policy: str, start: int
) -> PolicyCount:
    fleets: dict[int, FleetResult] = {}

    def meets(n: int) -> bool:
        sample = spec.round_robin_sample if policy == "round-robin" else None
        fleets[n] = simulate_fleet(make_sim, policy, n, spec.load(spec.target_rate), lengths, sample=sample)
        return serves(fleets[n], spec)

    n, tried = fewest(meets, start, spec.max_replicas)
    return PolicyCount(policy, n, fleets.get(n) if n else None, fleets.get(n - 1) if n else None, tried)


def size_fleet(
    make_sim: Callable[[], Simulator], lengths: LengthsFn, spec: SizingSpec, policies: list[str], gpus_per_replica: int
) -> FleetSizing:
    """One replica's capacity, then the count under each policy (each search starting at the last's count)."""
    one = one_replica_capacity(make_sim, lengths, spec)
    per_replica = one.rate or one.saturated_req_s
    start = math.ceil(spec.target_rate / per_replica)
    counts = []
    for policy in policies:
        count = replicas_needed(make_sim, lengths, spec, policy, start)
        counts.append(count)
        start = count.replicas or start
    return FleetSizing(spec, gpus_per_replica, one, counts)
