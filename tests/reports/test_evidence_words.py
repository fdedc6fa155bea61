"""A P99 finding's evidence in three to five sentences with units (issue 27), from the evidence dicts
the triage's checks really return (the planted runs of tests/planted.py)."""

from __future__ import annotations

from planted import base_records, clean_probes, delay_in_episodes, rows_in, write_run

from analyzers.triage.p99 import diagnose_p99
from reports.evidence_words.phrasing import seconds
from reports.evidence_words.sentences import evidence_sentences


def _planted(tmp_path, plant) -> dict:
    recs = base_records()
    t0 = recs[0].t_sent
    windows = delay_in_episodes(recs)
    probes = clean_probes(t0 - 1, max(r.t_done for r in recs) + 1)
    plant(probes, windows)
    d = diagnose_p99(write_run(tmp_path / "r", recs, probes)).to_dict()
    assert d["findings"], d["headline"]
    return d["findings"][0]


def test_a_neighbour_is_named_first_and_unchanged_figures_are_left_out(tmp_path):
    def plant(probes, windows):
        for row in probes["host"]:
            row["others_cpu_cores"], row["top_others"] = 1.2, [{"pid": 77, "comm": "cc1plus", "cpu_cores": 1.2}]
        for row in rows_in(probes["host"], windows):
            row["others_cpu_cores"] = 1.5
            row["top_others"] = [
                {"pid": 77, "comm": "cc1plus", "cpu_cores": 0.9},
                {"pid": 4242, "comm": "burner", "cpu_cores": 0.8},
            ]

    f = _planted(tmp_path, plant)
    said = evidence_sentences(f)
    assert 3 <= len(said) <= 5, said
    assert said[0] == "It coincides with 3 of the 3 spike windows (100% of the tail requests)."
    assert said[1].startswith("In the spike windows the CPU went to burner (pid 4242) 0.53 cores")
    assert not any("the host's CPU" in s for s in said)  # 40% in both: no evidence, not said
    assert said[-1].startswith("Next: ") and all(s.endswith(".") for s in said)


def test_retransmits_are_said_with_their_rates(tmp_path):
    def plant(probes, windows):
        for row in rows_in(probes["tcp"], windows):
            row["Tcp.RetransSegs"], row["TcpExt.TCPTimeouts"] = 40, 2
            row["conns_retrans"], row["conns_rto"] = 40, 1

    said = evidence_sentences(_planted(tmp_path, plant))
    # Judged by what each request lived through: how much there was, then the tail against the body.
    assert "240 TCP segments were retransmitted on the target's connections in 6 s." in said, said
    assert any(x.startswith("Without it, c8's TTFT P99 would be") for x in said), said
    assert 3 <= len(said) <= 5


def test_failed_requests_and_a_standing_tail_in_words():
    failures = {
        "kind": "differential",
        "coverage": 0.4,
        "next_step": "look at the server's log",
        "evidence": {
            "failed": 5,
            "requests": 200,
            "by_kind": {"timeout": 4, "http_status": 1},
            "dominant_kind": "timeout",
            "sample_error": "HTTP 503: overloaded",
            "tail_requests": 2,
            "tail_failed": 2,
        },
    }
    assert evidence_sentences(failures, "e2e") == [
        "It explains 40% of the E2E tail requests.",
        "5 of 200 requests failed (4 timeout, 1 http status).",
        "One of them said: HTTP 503: overloaded.",
        "Next: look at the server's log.",
    ]
    assert [seconds(x) for x in (0.0004, 0.412, 2.6298, 38.2)] == ["0.4 ms", "412 ms", "2.63 s", "38.2 s"]


def test_a_hot_replica_is_said_with_its_shares_and_its_latency_at_the_same_load(tmp_path):
    # tests/analyzers/triage/ is on the path through this folder's conftest.
    from fleet_runs import Replica, fleet_run

    d = diagnose_p99(fleet_run(tmp_path / "hot", [Replica(), Replica(slots=3)])).to_dict()
    said = evidence_sentences(d["findings"][0])
    assert d["findings"][0]["check_id"] == "p99.fleet.hot-replica" and 3 <= len(said) <= 5, said
    assert said[1] == "Replica 1 served 100% of the tail and 50% of the requests.", said
    assert said[2].startswith("At the same load its TTFT was 2.") and "in flight, theirs" in said[2], said
    d = diagnose_p99(
        fleet_run(tmp_path / "rr", [Replica(), Replica()], long_out=[i % 4 == 0 for i in range(1200)])
    ).to_dict()
    said = evidence_sentences(d["findings"][0])
    assert said[1].startswith("The slowest requests went to a replica holding 6 requests and"), said
    assert said[2].startswith("120 of the 120 slowest requests were sent to a clearly busier replica"), said


def test_a_hot_replica_judged_by_littles_law_says_so_not_the_same_load_ratio():
    finding = {
        "kind": "differential",
        "coverage": 1.0,
        "next_step": "look at replica 1",
        "evidence": {
            "replica": "1",
            "replica_shares": {"1": {"tail_share": 1.0, "request_share": 0.5}},
            "latency_vs_others_same_load": 1.3,
            "residence_per_work_vs_others": 4.5,
            "slowness_from": "residence",
            "latency_median_s": 0.064,
            "others_latency_median_s": 0.014,
            "in_flight_median": 6.0,
            "others_in_flight_median": 1.0,
        },
    }
    said = evidence_sentences(finding, "ttft")
    assert said[2] == (
        "Sent no more requests and no heavier ones, each stayed on it 4.5x as long as the others' did "
        "on theirs (median 64 ms with 6 in flight, theirs 14 ms with 1); at the loads the others had, "
        "1.3x."
    ), said
    assert not any("Also measured" in s and "residence" in s for s in said), said


def test_requests_that_waited_for_a_slot_are_said_as_such_not_as_sent_to_a_busier_replica(tmp_path):
    from fleet_runs import Replica, fleet_run

    run = fleet_run(
        tmp_path / "slot",
        [Replica(slots=3), Replica(slots=3)],
        concurrency=6,
        long_out=[i % 25 == 0 for i in range(1200)],
    )
    d = diagnose_p99(run).to_dict()
    said = evidence_sentences(d["findings"][0])
    assert d["findings"][0]["evidence"]["exposure"] == "waited for a slot", d["findings"][0]["title"]
    assert any("waited for a slot on a full replica while another had one free" in s for s in said), said
    assert not any("clearly busier" in s for s in said), said
