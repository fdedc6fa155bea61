"""A fleet routed by the front's own balancer: round robin ignores what each replica is busy with, so a
heavy-tailed length mix queues behind the long requests that least-outstanding steers around."""

from tiny_fleet import heavy_tailed, tiny_replica

from analyzers.plan.fleet import FleetLoad, simulate_fleet

LOAD = FleetLoad(rate=140.0, warmup_s=1.0, duration_s=4.0)


def test_round_robin_has_a_worse_ttft_tail_than_least_outstanding_on_a_heavy_tailed_mix():
    rr = simulate_fleet(tiny_replica, "round-robin", 3, LOAD, heavy_tailed)
    lo = simulate_fleet(tiny_replica, "least-outstanding", 3, LOAD, heavy_tailed)
    assert rr.simulated == lo.simulated == 3
    rr_p, lo_p = rr.prediction, lo.prediction
    assert rr_p.unfinished == lo_p.unfinished == 0
    # The same stream, the same requests: only the routing differs.
    assert abs(sum(rr.routed) - sum(lo.routed)) <= 1
    assert max(rr.routed) - min(rr.routed) <= 1  # round robin: every N-th arrival
    assert rr_p.ttft_p99_s > 1.5 * lo_p.ttft_p99_s


def test_a_round_robin_sample_is_one_replicas_share_of_the_stream():
    whole = simulate_fleet(tiny_replica, "round-robin", 3, LOAD, heavy_tailed)
    one = simulate_fleet(tiny_replica, "round-robin", 3, LOAD, heavy_tailed, sample=1)
    assert one.simulated == 1 and one.routed == whole.routed[:1]
    # Replica 0 is the same engine fed the same arrivals whether or not the others are simulated beside it,
    # up to the window's end: after it the load runs on until the simulated replicas' window requests have
    # finished (one replica's sooner than three's), and those later requests are no part of the prediction.
    end = LOAD.warmup_s + LOAD.duration_s
    first = sorted((r.t_sent, r.t_first_token) for r in whole.result.records if r.t_sent < end)[::3]
    alone = sorted((r for r in one.result.records if r.t_sent < end), key=lambda r: r.t_sent)
    assert [r.t_first_token for r in alone] == [t for _, t in first]
    assert len(one.result.records) > len(alone)  # it kept sending after the window


def test_one_replica_fleet_is_the_single_replica_simulation():
    """A fleet of one under either policy sends every arrival to it: the same records as Simulator.run at those times."""
    from analyzers.plan.fleet import poisson_times
    from analyzers.plan.simulate import LoadSpec

    load = FleetLoad(rate=30.0, warmup_s=1.0, duration_s=4.0)  # within one replica's capacity
    fleet = simulate_fleet(tiny_replica, "least-outstanding", 1, load, heavy_tailed)
    alone = tiny_replica().run(
        LoadSpec(
            load.warmup_s,
            load.duration_s,
            arrivals=poisson_times(load.rate, load.seed),
            drain_limit_s=load.drain_limit_s,
        ),
        heavy_tailed,
    )
    key = lambda r: (r.t_sent, r.t_first_token, r.t_done)
    assert sorted(map(key, fleet.result.records)) == sorted(map(key, alone.records))
