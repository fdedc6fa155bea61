"""`llmdiag p99` on fleets (analyzers/triage/fleet/): the replica that is slower at the same load is
named, a replica merely busier is the router's imbalance, a balanced fleet gets neither, failures
on one replica name it, and a single server is not a fleet."""

from __future__ import annotations

import dataclasses

import numpy as np
from fleet_runs import Replica, fleet_records, fleet_run
from planted import T0, base_records, write_run

from analyzers.triage.fleet.load_at_send import fleet_load
from analyzers.triage.p99 import diagnose_p99
from rundir import RequestRecord
from rundir.table import RequestTable

FLEET_IDS = ("p99.fleet.replica-failures", "p99.fleet.hot-replica", "p99.fleet.imbalance")


def _check(diag, check_id):
    return next(c for c in diag.checks if c.check_id == check_id)


def _ids(findings):
    return [f.check_id for f in findings]


def test_each_replicas_load_at_a_send_is_what_its_requests_still_had_to_do():
    def rec(t_sent, t_first, t_done, replica, n_in=10, n_out=100):
        return RequestRecord(
            level_id="c2",
            concurrency=2,
            request_rate=None,
            target_input_len=n_in,
            target_output_len=n_out,
            t_scheduled=T0 + t_sent,
            t_sent=T0 + t_sent,
            t_first_token=T0 + t_first,
            t_done=T0 + t_done,
            status="ok",
            in_window=True,
            prompt_tokens=n_in,
            completion_tokens=n_out,
            replica=replica,
        ).derive()

    # Replica 0 streams 100 tokens from 0.5 s to 2.5 s; replica 1's request is sent at 1.0 s, then one at 1.5 s.
    table = RequestTable.from_records(
        [rec(0.0, 0.5, 2.5, "0"), rec(1.0, 1.2, 3.0, "1", n_in=20, n_out=50), rec(1.5, 1.6, 2.0, "0")]
    )
    load = fleet_load(table)
    assert load is not None and load.replicas == ["0", "1"]
    assert load.in_flight.tolist() == [[0, 0], [1, 0], [1, 1]]
    # At 1.0 s replica 0's request has 75 of its 100 tokens to go; at 1.5 s 50, and replica 1's 50 of its 50.
    assert np.allclose(load.outstanding, [[0, 0], [75, 0], [50, 50 * (3.0 - 1.5) / 1.8]])
    assert np.allclose(load.lightest_other(load.outstanding), [0, 75, 50 * 1.5 / 1.8])


def test_a_replica_with_a_small_kv_cache_is_named_first_with_its_cache(tmp_path):
    diag = diagnose_p99(fleet_run(tmp_path / "r", [Replica(), Replica(slots=3)]))
    assert diag.findings and diag.findings[0].check_id == "p99.fleet.hot-replica", diag.headline
    f = diag.findings[0]
    assert f.evidence["replica"] == "1" and f.evidence["latency_vs_others_same_load"] >= 1.5
    assert f.evidence["replica_shares"]["1"]["tail_share"] > 0.8 > f.evidence["replica_shares"]["1"]["request_share"]
    assert "replica 1 had requests waiting with its KV cache full" in f.title and "replica 0's was" in f.title
    assert f.coverage >= 0.8 and "replica 1" in f.next_step
    # The work piled up on the slow replica: the routing is its consequence, not a second cause.
    assert "p99.fleet.imbalance" not in _ids(diag.findings + diag.context)
    assert "slower at the same load" in _check(diag, "p99.fleet.imbalance").detail


def test_a_slower_build_without_probes_is_named_too(tmp_path):
    diag = diagnose_p99(fleet_run(tmp_path / "r", [Replica(speed=2.0), Replica()], probes=False))
    assert diag.findings and diag.findings[0].check_id == "p99.fleet.hot-replica", diag.headline
    assert diag.findings[0].evidence["replica"] == "0" and "KV cache" not in diag.findings[0].title


def test_a_slow_replica_that_a_closed_loop_piled_every_user_onto_is_hot_by_littles_law(tmp_path):
    """A build 6x slower, twelve users in turn: the users' requests stay on it, so it holds nearly all
    of them while the fast one holds one or none, and no load of the fast one's is near its own. Sent
    the same requests, it kept each 6x as long: slower, not busier."""
    diag = diagnose_p99(fleet_run(tmp_path / "r", [Replica(speed=6.0), Replica()], probes=False, concurrency=12))
    assert diag.findings and diag.findings[0].check_id == "p99.fleet.hot-replica", diag.headline
    f = diag.findings[0]
    assert f.evidence["replica"] == "0" and f.evidence["residence_per_work_vs_others"] >= 1.5, f.evidence
    assert "no heavier ones" in f.title or "at the same load" in f.title, f.title


def test_a_replica_slower_at_every_load_is_hot_by_littles_law_though_under_the_same_load_ratio(tmp_path):
    """A build 1.4x slower behind a least-outstanding router: sent fewer requests, it holds as many in
    flight as the other, so nearly all of its requests meet loads the other had, and there it reads
    1.4x, under the same-load bar. Sent no more requests and no heavier ones, it kept each 1.4x as
    long: by Little's law that is slowness, whatever the comparison at equal holdings read (a real
    small-KV replica read 1.38x there while serving every tail request, and was called busier)."""
    run = fleet_run(tmp_path / "r", [Replica(), Replica(speed=1.4)], probes=False, least_outstanding=True)
    diag = diagnose_p99(run)
    assert diag.findings and diag.findings[0].check_id == "p99.fleet.hot-replica", diag.headline
    ev = diag.findings[0].evidence
    assert ev["replica"] == "1" and ev["same_load_matched_share"] >= 0.3, ev
    assert ev["latency_vs_others_same_load"] < 1.5 and ev["slowness_from"] == "residence", ev
    assert ev["residence_per_work_vs_others"] >= 1.3 and ev["residence_p_value"] <= 0.01, ev


def test_a_small_kv_replica_its_own_gauges_show_queueing_is_hot_where_its_latencies_are_too_few_to_tell(tmp_path):
    """A replica whose KV cache holds 3 requests beside one with room, seven users, a noisy decode: 150
    requests cannot tell its E2E apart (the shuffle gives its excess often) nor its TTFT at equal
    holdings. Its own scheduler can: it had requests waiting behind its full KV cache in scrape after
    scrape, the other never did, and its cache holds 3 requests to the other's 1,000 (the real small-KV
    replica of the slow fleet test read 1.44x, p = 0.006 on a quiet machine; a busier one missed)."""
    run = fleet_run(tmp_path / "r", [Replica(), Replica(slots=3)], n=150, seed=2, concurrency=7, decode_jitter=0.7)
    diag = diagnose_p99(run)
    assert diag.findings and diag.findings[0].check_id == "p99.fleet.hot-replica", diag.headline
    f = diag.findings[0]
    ev = f.evidence
    assert ev["replica"] == "1" and ev["slowness_from"] == "own queue", ev
    assert ev["latency_vs_others_same_load"] < 1.5 and ev["residence_p_value"] > 0.01, ev
    assert (
        ev["replica_gauges"]["kv_full_and_waiting_share"]
        >= 0.2
        >= ev["others_gauges"]["0"]["kv_full_and_waiting_share"]
    )
    assert ev["queued_behind_its_own_kv_cache"] is True, ev
    assert ev["replica_gauges"]["kv_room_requests"] * 1.5 <= ev["others_gauges"]["0"]["kv_room_requests"], ev
    assert "waited behind its own full KV cache" in f.title, f.title
    # The fleet's queueing, read off the summed gauges, is that replica's cache: context beside it.
    assert all(c.evidence.get("queue_was_replica") == "1" for c in diag.context if c.category == "scheduling")
    # Without the probe, nothing but latencies to go on: not named.
    bare = diagnose_p99(
        fleet_run(
            tmp_path / "bare",
            [Replica(), Replica(slots=3)],
            probes=False,
            n=150,
            seed=2,
            concurrency=7,
            decode_jitter=0.7,
        )
    )
    assert _check(bare, "p99.fleet.hot-replica").status == "passed"


def test_equal_replicas_one_queueing_alone_because_a_closed_loop_gave_it_a_user_more_are_not_hot(tmp_path):
    """Two replicas of 4 slots, seven users: one holds four users, queues now and then, and the other
    never does. Its gauges read like a small cache's, but its cache holds as many requests as the
    other's: the queue is where the users went, not less room."""
    run = fleet_run(
        tmp_path / "r", [Replica(slots=4), Replica(slots=4)], n=150, seed=0, concurrency=7, decode_jitter=0.7
    )
    diag = diagnose_p99(run)
    assert "p99.fleet.hot-replica" not in _ids(diag.findings + diag.context), diag.headline


def test_a_replica_busier_because_round_robin_gave_it_the_long_requests_is_imbalance(tmp_path):
    # Every fourth request asks for 400 tokens: round robin over two replicas gives them all to replica 0.
    diag = diagnose_p99(fleet_run(tmp_path / "r", [Replica(), Replica()], long_out=[i % 4 == 0 for i in range(1200)]))
    assert diag.findings and diag.findings[0].check_id == "p99.fleet.imbalance", diag.headline
    assert "p99.fleet.hot-replica" not in _ids(diag.findings + diag.context)
    hot = _check(diag, "p99.fleet.hot-replica")
    assert hot.status == "passed" and "busier, not slower" in hot.detail, hot.detail
    f = diag.findings[0]
    assert f.evidence["tail_own_outstanding_median"] > 2 * f.evidence["tail_lightest_outstanding_median"]
    assert "least-outstanding" in f.next_step and f.evidence["output_tokens_p99_over_median"] >= 4


def test_equal_replicas_where_round_robin_overfills_one_are_imbalance_and_its_queue_is_the_routings(tmp_path):
    # Both replicas run 3 requests at once; round robin hands replica 0 every long request, so it
    # queues past its room while replica 1 has room: the queue and the full KV cache are the routing's.
    diag = diagnose_p99(
        fleet_run(tmp_path / "r", [Replica(slots=3), Replica(slots=3)], long_out=[i % 4 == 0 for i in range(1200)])
    )
    assert diag.findings and diag.findings[0].check_id == "p99.fleet.imbalance", diag.headline
    assert _ids(diag.findings) == ["p99.fleet.imbalance"], diag.headline
    hot = _check(diag, "p99.fleet.hot-replica")
    assert hot.status == "passed" and "work per request" in hot.detail, hot.detail
    f = diag.findings[0]
    assert f.evidence["queue_with_room_elsewhere_share"] >= 0.5 and "had room" in f.title
    assert any(c.evidence.get("queue_was_the_routing") for c in diag.context), [c.check_id for c in diag.context]


def test_a_few_requests_that_waited_for_a_full_replicas_slot_while_another_had_one_are_imbalance(tmp_path):
    # Two replicas of 3 slots at concurrency 6; every 25th request is long, so now and then round
    # robin sends a request to a replica whose 3 slots are taken while the other has one free. Those
    # few waits make the tail; "sent to a busier replica" alone is shared with much of the body.
    run = fleet_run(
        tmp_path / "r", [Replica(slots=3), Replica(slots=3)], concurrency=6, long_out=[i % 25 == 0 for i in range(1200)]
    )
    load = fleet_load(RequestTable.load(run))
    assert load is not None and list(load.slots) == [3, 3]
    diag = diagnose_p99(run)
    assert _ids(diag.findings)[:1] == ["p99.fleet.imbalance"], diag.headline
    f = diag.findings[0]
    assert f.evidence["exposure"] == "waited for a slot" and "waited for a slot" in f.title, f.title
    assert f.evidence["replica_slots"] == [3, 3]


def test_a_replica_handed_the_long_outputs_is_busier_not_hot_though_its_tokens_per_request_barely_rose(tmp_path):
    # Every 20th request (always replica 0's turn) asks for 400 output tokens instead of 32: its mean
    # prompt + output tokens rise 13%, but an output token costs a decode step, so its work doubles.
    run = fleet_run(
        tmp_path / "r", [Replica(slots=3), Replica(slots=3)], concurrency=5, long_out=[i % 20 == 0 for i in range(1200)]
    )
    diag = diagnose_p99(run)
    assert _ids(diag.findings)[:1] == ["p99.fleet.imbalance"], diag.headline
    hot = _check(diag, "p99.fleet.hot-replica")
    assert hot.status == "passed" and "work per request" in hot.detail, hot.detail


def test_a_balanced_fleet_of_equal_replicas_gets_neither(tmp_path):
    diag = diagnose_p99(fleet_run(tmp_path / "r", [Replica(), Replica()]))
    assert not [i for i in _ids(diag.findings + diag.context) if i.startswith("p99.fleet.")], diag.headline
    assert all(_check(diag, i).status == "passed" for i in FLEET_IDS)
    # Routed by what each replica holds, equal replicas stay balanced too.
    diag = diagnose_p99(fleet_run(tmp_path / "lo", [Replica(), Replica()], least_outstanding=True))
    assert not [i for i in _ids(diag.findings + diag.context) if i.startswith("p99.fleet.")], diag.headline


def test_failures_on_one_replica_name_it(tmp_path):
    recs, _ = fleet_records([Replica(), Replica()], n=800)
    t_fail = (T0 + 6.0, T0 + 9.0)  # replica 1 restarts: its streams break, then the front cannot reach it
    out = []
    for r in recs:
        if r.replica == "1" and t_fail[0] <= r.t_sent <= t_fail[1]:
            broken = r.t_sent < T0 + 7.5
            r = dataclasses.replace(
                r,
                status="error",
                t_first_token=None,
                ttft_s=None,
                tpot_s=None,
                t_done=r.t_sent + 0.01,
                completion_tokens=None,
                error_kind="stream_broken" if broken else "http_status",
                error=(
                    "replica 1 ended the stream early"
                    if broken
                    else "HTTP 503: replica 1 (http://127.0.0.1:40001) did not answer"
                ),
                replica="1" if broken else None,
            ).derive()
        out.append(r)
    diag = diagnose_p99(write_run(tmp_path / "r", out))
    assert diag.findings and diag.findings[0].check_id == "p99.fleet.replica-failures", diag.headline
    f = diag.findings[0]
    n_failed = sum(r.status == "error" for r in out)
    assert f.evidence["replica"] == "1" and f.evidence["failed"] == n_failed and f.evidence["others_failure_rate"] == 0
    assert set(f.evidence["by_kind"]) == {"stream_broken", "http_status"}
    # The generic failures finding keeps none of the share the replica explains.
    assert "p99.failures" not in _ids(diag.findings)


def test_failures_spread_over_the_replicas_are_not_one_replicas(tmp_path):
    recs, _ = fleet_records([Replica(), Replica()], n=800)
    out = [
        dataclasses.replace(
            r,
            status="error",
            t_first_token=None,
            ttft_s=None,
            tpot_s=None,
            completion_tokens=None,
            error_kind="stream_broken",
            error="broken",
        ).derive()
        if i % 25 == 7
        else r
        for i, r in enumerate(recs)
    ]
    diag = diagnose_p99(write_run(tmp_path / "r", out))
    assert _check(diag, "p99.fleet.replica-failures").status == "passed"
    assert diag.findings and diag.findings[0].check_id == "p99.failures", diag.headline


def test_a_single_server_is_not_a_fleet(tmp_path):
    diag = diagnose_p99(write_run(tmp_path / "r", base_records(n=300)))
    for check_id in FLEET_IDS:
        c = _check(diag, check_id)
        assert c.status == "unchecked" and "not a fleet" in c.detail
    assert not any(i.startswith("p99.fleet.") for i in diag.headline.split(": ", 1)[-1].split(", "))


def test_littles_law_speaks_only_for_a_replica_sent_no_more_and_no_heavier_requests():
    from analyzers.triage.fleet.concentration import ReplicaShare
    from analyzers.triage.fleet.residence import residence as _residence

    e2e = np.array([3.0, 3.0, 1.0, 1.0])
    measured = np.ones(4, bool)
    mine, others = np.array([True, True, False, False]), np.array([False, False, True, True])

    def share(name, requests):
        return ReplicaShare(replica=name, requests=requests, request_share=requests / 4, tail=0, tail_share=0.0)

    even = [share("0", 2), share("1", 2)]
    assert _residence(e2e, measured, mine, others, 1.0, even[0], even).ratio == 3.0
    assert _residence(e2e, measured, mine, others, 1.2, even[0], even).ratio == 2.5  # per token of work
    assert _residence(e2e, measured, mine, others, 1.3, even[0], even) is None  # handed heavier work
    more = [share("0", 3), share("1", 1)]
    assert _residence(e2e, measured, mine, others, 1.0, more[0], more) is None  # sent more requests
    # Four requests cannot tell 3x from which replica happened to serve which (one shuffle in six).
    assert not _residence(e2e, measured, mine, others, 1.0, even[0], even).holds


def test_a_residence_holds_when_it_is_material_and_more_than_the_shuffle_gives():
    """Its neighbours: 1.4x over 50 requests each is slowness; the same spread with equal means is
    not, and neither is a significant 1.1x (not material)."""
    from analyzers.triage.fleet.concentration import ReplicaShare
    from analyzers.triage.fleet.residence import residence as _residence

    rng = np.random.default_rng(7)
    base = rng.gamma(4.0, 0.125, 50)  # E2E around 0.5 s, spread like a closed loop's
    even = [ReplicaShare("0", 50, 0, 0.5, 0.0), ReplicaShare("1", 50, 0, 0.5, 0.0)]
    mine, others = np.r_[np.ones(50, bool), np.zeros(50, bool)], np.r_[np.zeros(50, bool), np.ones(50, bool)]
    measured = np.ones(100, bool)

    def residence(factor):
        e2e = np.r_[base * factor, rng.permutation(base)]
        return _residence(e2e, measured, mine, others, 1.0, even[0], even)

    assert residence(1.4).holds
    assert not residence(1.0).holds
    big = _residence(
        np.r_[np.full(500, 1.1), np.full(500, 1.0)],
        np.ones(1000, bool),
        np.r_[np.ones(500, bool), np.zeros(500, bool)],
        np.r_[np.zeros(500, bool), np.ones(500, bool)],
        1.0,
        even[0],
        even,
    )
    assert big.p_value <= 0.01 and not big.holds  # significant, not material
