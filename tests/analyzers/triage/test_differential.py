"""Differential diagnosis on the neighbours of the cases the spike-window checks were built for:
what each request lived through separates the tail from the body (analyzers/triage/exposure.py)."""

from __future__ import annotations

import json

import numpy as np
from planted import base_records, clean_probes, delay, write_run

from analyzers.triage.exposure import differential, time_exposure
from analyzers.triage.p99 import diagnose_p99
from analyzers.triage.tail_windows import Window


def test_exposure_is_the_share_of_a_requests_window_the_condition_covers():
    share = time_exposure(
        np.array([0.0, 0.0, 5.0, 3.0]), np.array([10.0, 2.0, 6.0, 3.0]), [Window(1.0, 4.0), Window(3.5, 5.0)]
    )
    assert np.allclose(share, [0.4, 0.5, 0.0, 1.0])


def test_a_condition_both_tail_and_body_share_explains_nothing():
    rng = np.random.default_rng(1)
    values = rng.exponential(0.1, 400)
    rows = {"c4": np.arange(400)}
    everyone = np.ones(400, dtype=bool)
    d = differential(values, rows, everyone, everyone)
    assert d.tail_exposed == 1.0 and d.attributable == 0.0 and not d.separates
    half = rng.random(400) < 0.5  # exposure unrelated to latency
    assert not differential(values, rows, everyone, half).separates


def _neighbour_run(tmp_path, start_s: float, seconds: float, others_cores: float = 1.1):
    """c=4 on a 2-core host: for `seconds` from `start_s` other processes hold a core and every
    request sent then takes about twice as long to its first token (the reported case)."""
    recs = base_records(n=480, concurrency=4, seed=3)
    t0 = recs[0].t_sent
    on, off = t0 + start_s, t0 + start_s + seconds
    for r in recs:
        if on <= r.t_sent <= off:
            delay(r, 0.1 + 0.05 * ((r.t_sent * 1000) % 7) / 7)
    probes = clean_probes(t0 - 1, max(r.t_done for r in recs) + 1, ncpu=2)
    for row in probes["host"]:
        row.update(server_cpu_cores=1.0, cpu_pct=55.0, others_cpu_cores=0.05)
        if on < row["t"] <= off + 1.0:
            row.update(
                others_cpu_cores=others_cores,
                cpu_pct=100.0,
                cpu_pressure_some_share=1.0,
                top_others=[{"pid": 900 + k, "comm": "burn", "cpu_cores": others_cores / 4} for k in range(4)],
            )
    return write_run(tmp_path / "r", recs, probes, url="http://127.0.0.1:8000")


def test_a_neighbour_for_7_seconds_of_a_level_is_named_with_its_counterfactual(tmp_path):
    diag = diagnose_p99(_neighbour_run(tmp_path, start_s=9.0, seconds=7.0))
    assert diag.findings and diag.findings[0].check_id == "p99.host.cpu", diag.headline
    f = diag.findings[0]
    assert f.kind == "differential" and f.evidence["tail_exposed"] >= 0.8 and f.evidence["relative_risk"] >= 2
    assert "burn (pid 90" in f.title and "would be" in f.title and "instead of" in f.title, f.title
    assert f.evidence["percentile_without_s"] < f.evidence["percentile_with_s"]


def _half_core_neighbour(tmp_path, server_wait: float):
    """A server pinned to one core, and for two 3 s stretches (half the level) processes on that core
    holding half of it: less than half a core of a 2-core host, the server's own loss (vLLM's case)."""
    recs = base_records(n=480, concurrency=4, seed=5)
    t0 = recs[0].t_sent
    stretches = [(t0 + 3.0, t0 + 6.0), (t0 + 8.0, t0 + 11.0)]
    for r in recs:
        if any(a <= r.t_sent <= b for a, b in stretches):
            delay(r, 0.1 + 0.05 * ((r.t_sent * 1000) % 7) / 7)
    probes = clean_probes(t0 - 1, max(r.t_done for r in recs) + 1, ncpu=2)
    for row in probes["host"]:
        row.update(server_cpu_cores=1.0, cpu_pct=55.0, others_cpu_cores=0.01, server_cpu_wait_share=0.28)
        if any(a < row["t"] <= b + 1.0 for a, b in stretches):
            row.update(
                server_cpu_cores=0.52,
                others_cpu_cores=0.48,
                server_cpu_wait_share=server_wait,
                top_others=[{"pid": 900 + k, "comm": "burn", "cpu_cores": 0.06} for k in range(8)],
            )
    return write_run(tmp_path / "r", recs, probes, url="http://127.0.0.1:8000")


def test_half_a_core_taken_from_a_server_that_waited_for_it_is_a_neighbour(tmp_path):
    diag = diagnose_p99(_half_core_neighbour(tmp_path, server_wait=0.6))
    assert diag.findings and diag.findings[0].check_id == "p99.host.cpu", diag.headline
    assert diag.findings[0].kind == "differential"


def test_half_a_core_beside_a_server_that_never_waited_is_not(tmp_path):
    diag = diagnose_p99(_half_core_neighbour(tmp_path, server_wait=0.1))
    assert not any(f.check_id == "p99.host.cpu" for f in diag.findings), diag.headline


def test_a_neighbour_for_the_whole_level_is_not_a_difference_between_requests(tmp_path):
    """Held the whole time, it is no condition one request lived through and another did not:
    nothing separates the tail (the standing-tail analysis is what judges a level slow throughout)."""
    diag = diagnose_p99(_neighbour_run(tmp_path, start_s=-5.0, seconds=10_000.0))
    assert not any(f.kind == "differential" for f in diag.findings + diag.context)


def _hol_run(tmp_path, every_short_blocked: bool = True):
    """Chunked prefill off, c=4: a short request that arrives while a long prompt waits for its
    first token waits for its whole prefill (~1.1 s); the others take ~100 ms."""
    recs = base_records(n=480, concurrency=4, seed=5, prompt=24, long_every=7, long_prompt=1536)
    longs = [r for r in recs if r.prompt_tokens == 1536]
    for r in longs:
        delay(r, 1.1 - (r.t_first_token - r.t_sent))
    for r in recs:
        if r.prompt_tokens == 1536:
            continue
        pending = [q for q in longs if q.t_sent <= r.t_sent < q.t_first_token]
        if pending:
            delay(r, max(0.0, max(q.t_first_token for q in pending) + 0.02 - r.t_first_token))
    return write_run(
        tmp_path / "r",
        recs,
        clean_probes(recs[0].t_sent - 1, max(r.t_done for r in recs) + 1),
        url="http://127.0.0.1:8000",
    )


def test_head_of_line_blocking_everywhere_is_named_not_saturation(tmp_path):
    diag = diagnose_p99(_hol_run(tmp_path))
    assert diag.findings and diag.findings[0].check_id == "p99.sched.long-prefill", diag.headline
    f = diag.findings[0]
    assert "long prefill" in f.title and f.evidence["tail_exposed"] >= 0.8
    assert not any(x.check_id == "p99.sched.saturation" for x in diag.findings)


def test_a_neighbour_that_exited_before_each_sample_is_still_seen_where_the_server_waited(tmp_path):
    """Burners stopped mid-interval take their ticks out of /proc before the probe reads it: the
    named others show nothing, yet /proc/stat counted the cores busy and the server's threads waited.
    Unnamed busy CPU where the target waited is a neighbour's; where it did not, it is nobody's
    problem (a load generator's processes ending with a level)."""
    run = _neighbour_run(tmp_path, start_s=9.0, seconds=7.0)
    rows = [json.loads(line) for line in run.probe_file("host").read_text().splitlines()]
    for row in rows:
        busy = row["others_cpu_cores"] > 0.5
        row.update(
            others_cpu_cores=0.02, top_others=[], client_cpu_cores=0.1, server_cpu_wait_share=0.6 if busy else 0.1
        )
    run.probe_file("host").write_text("".join(json.dumps(r) + "\n" for r in rows))
    diag = diagnose_p99(run)
    assert diag.findings and diag.findings[0].check_id == "p99.host.cpu", diag.headline
    for row in rows:
        row["server_cpu_wait_share"] = 0.1  # the server never waited
    run.probe_file("host").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert not any(f.check_id == "p99.host.cpu" for f in diagnose_p99(run).findings)


def test_the_queue_behind_a_long_prefill_is_its_consequence_not_a_rival_cause(tmp_path):
    """Chunked prefill off: the short requests stuck behind a long prompt are *waiting*; the server's
    waiting gauge rises in exactly those windows. The long prefill is the cause, the queue its shape."""
    run = _hol_run(tmp_path)
    diag = diagnose_p99(run)
    spikes = diag.tails.spikes
    rows = [json.loads(line) for line in run.probe_file("server").read_text().splitlines()]
    for row in rows:
        row["waiting"] = 2 if any(row["t"] - 1.0 < w.end and row["t"] > w.start for w in spikes) else 0
    run.probe_file("server").write_text("".join(json.dumps(r) + "\n" for r in rows))
    diag = diagnose_p99(run)
    assert diag.findings[0].check_id == "p99.sched.long-prefill", [f.title for f in diag.findings]
    assert any(f.check_id == "p99.sched.queueing" for f in diag.context), [f.check_id for f in diag.context]


def _felt_neighbour_without_effect(tmp_path, server_wait: float):
    """For 3 s of a level other processes hold 1.5 cores of a 2-core host and the server's threads
    wait for a CPU, but no request is slower for it (a level whose TTFT is its queue): the seed-4
    family's confounded draws."""
    recs = base_records(n=480, concurrency=4, seed=7)
    t0 = recs[0].t_sent
    on, off = t0 + 5.0, t0 + 8.0
    probes = clean_probes(t0 - 1, max(r.t_done for r in recs) + 1, ncpu=2)
    for row in probes["host"]:
        row.update(server_cpu_cores=0.9, cpu_pct=50.0, others_cpu_cores=0.01, server_cpu_wait_share=0.03)
        if on < row["t"] <= off:
            row.update(
                server_cpu_cores=0.4,
                cpu_pct=100.0,
                others_cpu_cores=1.5,
                server_cpu_wait_share=server_wait,
                top_others=[{"pid": 900 + k, "comm": "burn", "cpu_cores": 0.375} for k in range(4)],
            )
    return write_run(tmp_path / "r", recs, probes, url="http://127.0.0.1:8000")


def test_a_felt_neighbour_that_slowed_no_request_is_context_not_a_cause(tmp_path):
    diag = diagnose_p99(_felt_neighbour_without_effect(tmp_path, server_wait=0.7))
    assert not any(f.check_id == "p99.host.cpu" for f in diag.findings), diag.headline
    told = [f for f in diag.context if f.check_id == "p99.host.cpu"]
    assert told and "the server felt" in told[0].title and "not the tail's cause" in told[0].title, diag.context
    assert "burn (pid 90" in told[0].title and told[0].coverage == 0.0


def test_other_processes_the_server_never_waited_for_are_not_told(tmp_path):
    diag = diagnose_p99(_felt_neighbour_without_effect(tmp_path, server_wait=0.05))
    assert not any(f.check_id == "p99.host.cpu" for f in diag.findings + diag.context), diag.context
