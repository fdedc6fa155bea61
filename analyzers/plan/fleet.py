"""N replicas of one engine fed by one arrival stream, routed by the fleet front's own balancer.

refengine's data-parallel front picks the replica of each request with `LoadBalancer`
(refengine/server/dp_policy.py); here the same object picks it, at each arrival, over N simulated
engines (simulate.py's EngineRun, each on its own virtual clock, advanced to that arrival first), so
the policy's decisions are the front's code deciding them (docs/planning.md, "A fleet"):

- `round-robin`: replica k gets arrivals k, k + N, k + 2N, ...; the choice never depends on the
  replicas' state, so each replica is exactly one engine fed every N-th arrival, and simulating
  `sample` of them (their requests are distributed as every replica's) predicts the fleet at a
  fraction of the cost;
- `least-outstanding`: the replica with the fewest requests in flight (routed, response not ended)
  at that moment, ties round-robin: every replica's state matters, so all N run together;
- `even-split`: no router; each replica its own Poisson stream at rate / N (the ranking's model,
  analyzers/plan/rank.py; what a router that picks at random gives), a reference beside the two.

One stream: Poisson arrivals at `rate` from unit draws of a seeded generator (a different rate
scales the same gaps: common random numbers, so predictions at two rates differ by the rate, not by
the draw), and request i's lengths are `lengths(i)` whichever replica serves it.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from analyzers.diagnosis_error import DiagnosisError
from analyzers.plan.predict import LevelPrediction, summarize
from analyzers.plan.simulate import EngineRun, LengthsFn, LoadSpec, SimRecord, SimResult, Simulator
from refengine.server.dp_policy import LB_POLICIES, LoadBalancer

EVEN_SPLIT = "even-split"
FLEET_POLICIES = (*LB_POLICIES, EVEN_SPLIT)


@dataclass(frozen=True)
class FleetLoad:
    """An open loop at `rate` requests/s over the whole fleet."""

    rate: float
    warmup_s: float = 20.0
    duration_s: float = 60.0
    seed: int = 0
    # A window request unfinished this long after the window is over capacity (its percentiles then
    # leave it out and the prediction misses the SLO): shorter than a level's 600 s, since sizing
    # simulates many loads below the count it needs.
    drain_limit_s: float = 60.0
    # Stop once more window requests have waited past this TTFT than a P99 within it allows (2% of the
    # window's expected requests, plus two): the fleet misses the SLO whatever follows, and an over-capacity
    # fleet's queue would otherwise be simulated to the end. None: never stop early.
    stop_past_ttft_s: float | None = None

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise DiagnosisError(f"a fleet's request rate must be > 0, got {self.rate}")
        if self.warmup_s < 0 or self.duration_s <= 0:
            raise DiagnosisError("warm-up must be >= 0 and the window > 0")


@dataclass
class FleetResult:
    policy: str
    replicas: int
    simulated: int  # replicas simulated (round robin may sample; the others all)
    result: SimResult  # the simulated replicas' records pooled
    routed: list[int]  # window requests each simulated replica served
    stopped_early: bool = False  # past FleetLoad.stop_past_ttft_s: its percentiles are partial

    def __post_init__(self) -> None:
        if not 1 <= self.simulated <= self.replicas or len(self.routed) != self.simulated:
            raise ValueError(f"{self.simulated} of {self.replicas} replicas simulated, {len(self.routed)} counted")

    @property
    def prediction(self) -> LevelPrediction:
        return summarize(f"{self.replicas}x {self.policy}", self.result)

    def good_req_s(self, slo_ttft_s: float, slo_tpot_s: float) -> float:
        """The fleet's goodput: window requests per second that met both bounds, over all replicas."""
        good = sum(
            1
            for r in self.result.in_window
            if r.ttft_s is not None
            and r.ttft_s <= slo_ttft_s
            and r.t_done is not None
            and (r.tpot_s is None or r.tpot_s <= slo_tpot_s)
        )
        lo, hi = self.result.window
        return good / (hi - lo) * self.replicas / self.simulated


def unit_gaps(seed: int) -> Iterator[float]:
    """Exponential gaps of mean 1 (divide by a rate): the same draws at every rate."""
    rng = random.Random(f"fleet/{seed}")
    return (rng.expovariate(1.0) for _ in itertools.count())


def poisson_times(rate: float, seed: int) -> Iterator[float]:
    return itertools.accumulate(g / rate for g in unit_gaps(seed))


def simulate_fleet(
    make_sim: Callable[[], Simulator],
    policy: str,
    replicas: int,
    load: FleetLoad,
    lengths: LengthsFn,
    sample: int | None = None,
    max_steps: int = 2_000_000,
) -> FleetResult:
    """`replicas` engines (each from `make_sim`) serving `load` under `policy`; `sample` (round robin
    and even split only: their replicas do not interact) simulates that many of them."""
    if policy not in FLEET_POLICIES:
        raise DiagnosisError(f"a fleet's policy is one of {', '.join(FLEET_POLICIES)}, got {policy!r}")
    if replicas < 1:
        raise DiagnosisError(f"a fleet has at least one replica, got {replicas}")
    independent = policy != "least-outstanding"
    n_sim = min(replicas, sample) if sample is not None and independent else replicas
    if n_sim < 1:
        raise DiagnosisError(f"simulate at least one replica, got sample={sample}")
    late = _LateWatch(load, n_sim / replicas)
    if policy == EVEN_SPLIT:
        runs = [_even_split_run(make_sim(), k, replicas, load, lengths) for k in range(n_sim)]
        stopped = _drain(runs, 0.0, load, max_steps, late)
    else:
        runs = [_replica_run(make_sim(), k, load, lengths) for k in range(n_sim)]
        stopped = _route(runs, LoadBalancer(replicas, policy), load, max_steps, late)
    results = [run.result(max_steps) for run in runs]
    if stopped:
        results[0].notes.add(
            f"stopped early: more window requests waited past {load.stop_past_ttft_s:g} s for a "
            "first token than a P99 within it allows"
        )
    return FleetResult(policy, replicas, n_sim, _pooled(results), [len(r.in_window) for r in results], stopped)


def _replica_run(sim: Simulator, k: int, load: FleetLoad, lengths: LengthsFn) -> EngineRun:
    """Replica k: an open loop whose arrivals the router sends (its own iterator is empty)."""
    spec = LoadSpec(load.warmup_s, load.duration_s, arrivals=iter(()), drain_limit_s=load.drain_limit_s, seed=k)
    return EngineRun(sim, spec, lengths, None)


def _even_split_run(sim: Simulator, k: int, replicas: int, load: FleetLoad, lengths: LengthsFn) -> EngineRun:
    """Replica k of an even split: its own Poisson stream at rate / N, its j-th request the stream's k + jN-th."""
    spec = LoadSpec(
        load.warmup_s,
        load.duration_s,
        arrivals=poisson_times(load.rate / replicas, load.seed * 7919 + k),
        drain_limit_s=load.drain_limit_s,
        seed=k,
    )
    return EngineRun(sim, spec, lambda j: lengths(k + j * replicas), None)


class _LateWatch:
    """FleetLoad.stop_past_ttft_s, checked once a simulated second: window requests whose TTFT is known to
    exceed the bound (a first token past it, or none by the replica's own clock, which has run that far)."""

    def __init__(self, load: FleetLoad, share: float):
        self.bound, self.window = load.stop_past_ttft_s, (load.warmup_s, load.warmup_s + load.duration_s)
        self.allowed = 0.02 * load.rate * load.duration_s * share + 2
        self.next_check = 0.0

    def over(self, runs: list[EngineRun], t: float) -> bool:
        if self.bound is None or t < self.next_check:
            return False
        self.next_check = t + 1.0
        lo, hi = self.window
        late = 0
        for run in runs:
            for r in run.records.values():
                if (
                    lo <= r.t_sent < hi
                    and (r.t_first_token if r.t_first_token is not None else run.now) - r.t_sent > self.bound
                ):
                    late += 1
        return late > self.allowed


def _drain(runs: list[EngineRun], start: float, load: FleetLoad, max_steps: int, late: _LateWatch) -> bool:
    """Every replica run to the end of the drain, a second at a time; True when stopped early."""
    t, end = start, load.warmup_s + load.duration_s + load.drain_limit_s
    while t < end:
        t = min(end, t + 1.0)
        for run in runs:
            run.advance(t, max_steps)
        if late.over(runs, t):
            return True
    return False


def _route(runs: list[EngineRun], balancer: LoadBalancer, load: FleetLoad, max_steps: int, late: _LateWatch) -> bool:
    """Each arrival of the window (and warm-up): every replica advanced to it, the balancer's pick sends it.
    Replicas beyond the simulated ones (a round-robin sample) get their arrivals dropped unsimulated."""
    end = load.warmup_s + load.duration_s
    every = frozenset(range(balancer.size))
    done_seen = [0] * len(runs)  # per replica: finished requests already counted as ended
    for i, t in enumerate(poisson_times(load.rate, load.seed)):
        if t >= end and _windows_done(runs, t, load, max_steps):
            break
        if balancer.policy == "least-outstanding":
            for k, run in enumerate(runs):
                run.advance(t, max_steps, more_coming=True)
                times = run.done_times
                while done_seen[k] < len(times) and times[done_seen[k]] <= t:  # responses ended by t
                    balancer.finished(k)
                    done_seen[k] += 1
        pick = balancer.pick(every)
        assert pick is not None  # every replica is eligible
        balancer.started(pick)
        if pick < len(runs):
            if balancer.policy != "least-outstanding":
                runs[pick].advance(t, max_steps, more_coming=True)
            runs[pick].send(t, index=i)
        if late.over(runs, t):
            return True
    return _drain(runs, end, load, max_steps, late)


def _windows_done(runs: list[EngineRun], t: float, load: FleetLoad, max_steps: int) -> bool:
    """After the window the router keeps sending, as the sweep's load does (LoadSpec.keep_load), until
    every replica has finished the window's requests by `t` (or the drain's bound has passed)."""
    if t >= load.warmup_s + load.duration_s + load.drain_limit_s:
        return True
    for run in runs:
        run.advance(t, max_steps, more_coming=True)
    return all(run.window_done() for run in runs)


def _pooled(results: list[SimResult]) -> SimResult:
    """The replicas' records as one level's; per-step means averaged over the replicas."""
    records: list[SimRecord] = [r for res in results for r in res.records]
    n = len(results)
    notes = set().union(*(res.notes for res in results))
    return SimResult(
        records,
        results[0].window,
        sum(r.tokens_in_window for r in results),
        sum(r.steps for r in results),
        sum(r.preemptions for r in results),
        notes,
        sum(r.mean_batch for r in results) / n,
    )
