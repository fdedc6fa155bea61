"""A fleet routed by the front's own balancer: round robin ignores what each replica is busy with, so a
heavy-tailed length mix queues behind the long requests that least-outstanding steers around."""

from analyzers.model.presets import resolve_model
from analyzers.plan.fleet import FleetLoad, simulate_fleet
from analyzers.plan.gpu_profiles import published_profile
from analyzers.plan.simulate import Simulator, random_prompt
from analyzers.plan.step_model import StepModel
from refengine.config import CacheConfig, SchedulerConfig


def tiny_replica() -> Simulator:
    # Four seats per replica: a seat held by a 200-token answer is one a short request cannot have.
    return Simulator(StepModel(resolve_model("tiny-test"), published_profile("h100")),
                     SchedulerConfig(max_num_seqs=4, max_model_len=512), CacheConfig(num_blocks=2000))


def heavy_tailed(i: int) -> tuple[list[int], int]:
    """One request in ten answers 200 tokens, the others 10 (a fixed hash of the index: the same mix everywhere)."""
    long = (i * 2654435761) % 1000 < 100
    return random_prompt(16, 0, i, vocab=4096), 200 if long else 10


LOAD = FleetLoad(rate=140.0, warmup_s=1.0, duration_s=4.0)


def test_round_robin_has_a_worse_ttft_tail_than_least_outstanding_on_a_heavy_tailed_mix():
    rr = simulate_fleet(tiny_replica, "round-robin", 3, LOAD, heavy_tailed)
    lo = simulate_fleet(tiny_replica, "least-outstanding", 3, LOAD, heavy_tailed)
    assert rr.simulated == lo.simulated == 3
    rr_p, lo_p = rr.prediction, lo.prediction
    assert rr_p.unfinished == lo_p.unfinished == 0
    # The same stream, the same requests: only the routing differs.
    assert abs(sum(rr.routed) - sum(lo.routed)) <= 1
    assert max(rr.routed) - min(rr.routed) <= 1               # round robin: every N-th arrival
    assert rr_p.ttft_p99_s > 1.5 * lo_p.ttft_p99_s


def test_a_round_robin_sample_is_one_replicas_share_of_the_stream():
    whole = simulate_fleet(tiny_replica, "round-robin", 3, LOAD, heavy_tailed)
    one = simulate_fleet(tiny_replica, "round-robin", 3, LOAD, heavy_tailed, sample=1)
    assert one.simulated == 1 and one.routed == whole.routed[:1]
    # Replica 0 is the same engine fed the same arrivals whether or not the others are simulated beside it.
    first = sorted((r.t_sent, r.t_first_token) for r in whole.result.records if r.t_sent >= 0)[::3]
    assert [r.t_first_token for r in sorted(one.result.records, key=lambda r: r.t_sent)] == [t for _, t in first]


def test_one_replica_fleet_is_the_single_replica_simulation():
    """A fleet of one under either policy sends every arrival to it: the same records as Simulator.run at those times."""
    from analyzers.plan.fleet import poisson_times
    from analyzers.plan.simulate import LoadSpec
    load = FleetLoad(rate=30.0, warmup_s=1.0, duration_s=4.0)      # within one replica's capacity
    fleet = simulate_fleet(tiny_replica, "least-outstanding", 1, load, heavy_tailed)
    alone = tiny_replica().run(LoadSpec(load.warmup_s, load.duration_s, arrivals=poisson_times(load.rate, load.seed),
                                        drain_limit_s=load.drain_limit_s), heavy_tailed)
    key = lambda r: (r.t_sent, r.t_first_token, r.t_done)
    assert sorted(map(key, fleet.result.records)) == sorted(map(key, alone.records))
