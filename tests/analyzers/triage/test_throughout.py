"""Conditions that held for a whole level (analyzers/triage/throughout.py): a neighbour or a lossy
path under every request leaves no calm to compare with, and is judged on its own terms."""

from __future__ import annotations

import numpy as np
from planted import base_records, clean_probes, delay, write_run

from analyzers.triage.p99 import diagnose_p99


def _whole_level_neighbour(tmp_path, server_wait: float | None, others_cores: float = 1.6):
    """c=4 on a 2-core host, a neighbour for the whole level: every request slower than alone, some
    much slower (the scheduler gave the server its timeslice late): the level's tail."""
    recs = base_records(n=400, concurrency=4, seed=11)
    rng = np.random.default_rng(5)
    for r in recs:
        delay(r, 0.1 + float(rng.exponential(0.04)) + (0.3 if rng.random() < 0.03 else 0.0))
    probes = clean_probes(recs[0].t_sent - 1, max(r.t_done for r in recs) + 1, ncpu=2)
    for row in probes["host"]:
        row.update(
            server_cpu_cores=0.3,
            cpu_pct=100.0,
            others_cpu_cores=others_cores,
            cpu_pressure_some_share=1.0,
            top_others=[{"pid": 900 + k, "comm": "burn", "cpu_cores": others_cores / 4} for k in range(4)],
        )
        if server_wait is not None:
            row["server_cpu_wait_share"] = server_wait
    for row in probes["server"]:
        row["waiting"] = 2  # the queue behind the slower steps
    return write_run(tmp_path / "r", recs, probes, url="http://127.0.0.1:8000")


def test_a_neighbour_for_the_whole_level_is_named_and_the_queue_is_its_consequence(tmp_path):
    diag = diagnose_p99(_whole_level_neighbour(tmp_path, server_wait=0.8))
    assert diag.findings and diag.findings[0].check_id == "p99.host.cpu", diag.headline
    f = diag.findings[0]
    assert f.kind == "throughout" and f.coverage == 1.0
    assert "throughout c8" in f.title and "1.6 of 2 cores" in f.title and "burn (pid 90" in f.title, f.title
    assert "the server's threads waited for a CPU 80% of the time" in f.title
    assert "no stretch without it" in f.title
    assert all(x.check_id != "p99.sched.queueing" for x in diag.findings), [x.title for x in diag.findings]


def test_a_neighbour_the_server_never_waited_for_is_not_a_cause(tmp_path):
    """Other processes busy beside a server that got every core it asked for (its threads did not
    wait): host-wide, not the target's problem."""
    diag = diagnose_p99(_whole_level_neighbour(tmp_path, server_wait=0.02))
    assert not any(f.check_id == "p99.host.cpu" for f in diag.findings + diag.context), diag.headline


def test_without_the_servers_own_wait_run_queue_pressure_decides(tmp_path):
    diag = diagnose_p99(_whole_level_neighbour(tmp_path, server_wait=None))
    assert diag.findings and diag.findings[0].check_id == "p99.host.cpu"
    assert "some task waited for a CPU 100% of the time" in diag.findings[0].title


def test_a_clean_level_has_no_neighbour_throughout(tmp_path):
    recs = base_records(n=400, concurrency=4, seed=11)
    probes = clean_probes(recs[0].t_sent - 1, max(r.t_done for r in recs) + 1, ncpu=2)
    for row in probes["host"]:
        row.update(server_cpu_wait_share=0.3, cpu_pressure_some_share=0.4)
    diag = diagnose_p99(write_run(tmp_path / "r", recs, probes, url="http://127.0.0.1:8000"))
    assert diag.findings == [], diag.headline


def _lossy_level(tmp_path, retrans_every: int):
    """A remote target whose own connections retransmit in every `retrans_every`-th second of the
    level; requests that met a loss waited an RTO (200 ms) for it."""
    recs = base_records(n=600, concurrency=8, seed=4)
    rng = np.random.default_rng(2)
    for r in recs:
        if rng.random() < 0.08:
            delay(r, 0.2 + 0.2 * rng.random())
    probes = clean_probes(recs[0].t_sent - 1, max(r.t_done for r in recs) + 1)
    for i, row in enumerate(probes["tcp"]):
        if i % retrans_every == 0:
            row.update({"Tcp.RetransSegs": 12, "conns_retrans": 12, "conns_rto": 1})
    return write_run(tmp_path / "r", recs, probes)


def test_retransmits_on_the_targets_connections_through_the_whole_level_are_named(tmp_path):
    diag = diagnose_p99(_lossy_level(tmp_path, retrans_every=1))
    assert diag.findings and diag.findings[0].check_id == "p99.net.retransmits", diag.headline
    f = diag.findings[0]
    assert f.kind == "throughout" and f.severity == "high" and "throughout c8" in f.title, f.title
    assert f.evidence["retrans_throughout"] > 100


def test_occasional_retransmits_are_not_a_condition_of_the_whole_level(tmp_path):
    diag = diagnose_p99(_lossy_level(tmp_path, retrans_every=4))
    assert not any(f.kind == "throughout" for f in diag.findings + diag.context), diag.headline


def test_a_throughout_finding_in_words(tmp_path):
    from dataclasses import asdict

    from reports.evidence_words.sentences import evidence_sentences

    f = diagnose_p99(_whole_level_neighbour(tmp_path, server_wait=0.8)).findings[0]
    said = evidence_sentences(dict(asdict(f), coverage=f.coverage))
    assert (
        said[0] == "It held through the whole of c8 (100% of the tail requests): no stretch of the run without "
        "it to compare with."
    ), said
    assert "Other processes held 1.6 cores, and the server's threads waited for a CPU 80% of the time." in said
    assert 3 <= len(said) <= 5 and said[-1].startswith("Next: rerun with the neighbour gone")


def test_only_the_queue_of_the_levels_the_neighbour_held_is_its_consequence():
    from analyzers.triage.tail_shares import _inside
    from analyzers.triage.tail_windows import Window

    held = [Window(100.0, 160.0)]  # c32, beside the neighbour
    assert _inside([Window(100.0, 150.0)], held)  # queueing in c32: its consequence
    assert not _inside([Window(100.0, 150.0), Window(170.0, 260.0)], held)  # saturation of c32 and c64 too
    assert not _inside([Window(170.0, 260.0)], held)


def _baseline_then_admission(tmp_path, neighbour_in_baseline: bool):
    """c1 (the baseline), then c8 behind an admission limit of 2: every c8 request waits ~0.6 s in the
    queue; a neighbour holds the host's cores through c8, and through c1 too or not."""
    from dataclasses import replace

    base = [replace(r, level_id="c1").derive() for r in base_records(n=120, concurrency=1, seed=3)]
    start = max(r.t_done for r in base) + 2.0
    loaded = []
    for r in base_records(n=400, concurrency=8, seed=4):
        shift = start - base[0].t_sent
        r = replace(
            r,
            t_scheduled=r.t_scheduled + shift,
            t_sent=r.t_sent + shift,
            t_first_token=r.t_first_token + shift,
            t_done=r.t_done + shift,
        ).derive()
        delay(r, 0.6)
        loaded.append(r)
    recs = base + loaded
    probes = clean_probes(recs[0].t_sent - 1, max(r.t_done for r in recs) + 1, ncpu=2)
    for row in probes["host"]:
        if neighbour_in_baseline or row["t"] >= start:
            row.update(
                server_cpu_cores=0.5,
                cpu_pct=100.0,
                others_cpu_cores=1.4,
                server_cpu_wait_share=0.6,
                top_others=[{"pid": 901, "comm": "burn", "cpu_cores": 1.4}],
            )
    for row in probes["server"]:
        row.update(running=2, waiting=6) if row["t"] >= start else row.update(running=1, waiting=0)
    run = write_run(tmp_path / "r", recs, probes, url="http://127.0.0.1:8000")
    info = run.read_info()
    info.target.engine_args = ["--max-num-seqs=2"]
    run.write_info(info)
    return run


def test_a_neighbour_the_baseline_lived_through_does_not_explain_the_standing_excess(tmp_path):
    """The c1 baseline had the neighbour too and stood fine: c8's 6x over it is the admission queue."""
    diag = diagnose_p99(_baseline_then_admission(tmp_path, neighbour_in_baseline=True))
    assert diag.findings and diag.findings[0].check_id == "p99.sched.admission", [f.title for f in diag.findings]
    assert not any(f.check_id == "p99.host.cpu" for f in diag.findings), [f.title for f in diag.findings]
    neighbour = [f for f in diag.context if f.check_id == "p99.host.cpu"]
    assert neighbour and neighbour[0].evidence["baseline_lived_through_it"] == ["c8"]


def test_a_neighbour_only_in_the_loaded_level_stays_a_cause(tmp_path):
    diag = diagnose_p99(_baseline_then_admission(tmp_path, neighbour_in_baseline=False))
    assert any(f.check_id == "p99.host.cpu" and f.kind == "throughout" for f in diag.findings), [
        f.title for f in diag.findings
    ]
