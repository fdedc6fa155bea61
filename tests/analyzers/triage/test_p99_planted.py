"""`llmdiag p99` on run directories that each carry one planted cause: the cause is named, ranked
first, and nothing else is invented; clean data gives "no cause found"."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from planted import (
    base_records,
    clean_probes,
    delay_in_episodes,
    plant_head_of_line,
    rows_in,
    write_run,
)

from analyzers.triage.p99 import diagnose_p99, mark_playbook


def _probes(recs):
    return clean_probes(recs[0].t_sent - 1, max(r.t_done for r in recs) + 1)


def test_clean_run_has_no_cause(tmp_path):
    recs = base_records()
    diag = diagnose_p99(write_run(tmp_path / "r", recs, _probes(recs)))
    assert diag.findings == [] and diag.headline.startswith("no cause found among: p99.failures, p99.net.retransmits")
    assert not any(c.status == "failed" for c in diag.checks)


def test_spikes_without_evidence_find_no_cause(tmp_path):
    recs = base_records()
    delay_in_episodes(recs)
    diag = diagnose_p99(write_run(tmp_path / "r", recs, _probes(recs)))
    assert len(diag.tails.spikes) == 3 and diag.findings == [], [f.title for f in diag.findings]


def test_retransmit_burst_is_ranked_first(tmp_path):
    recs = base_records()
    windows = delay_in_episodes(recs)
    probes = _probes(recs)
    for row in rows_in(probes["tcp"], windows):
        row["Tcp.RetransSegs"], row["TcpExt.TCPTimeouts"] = 40, 2
        row["conns_retrans"], row["conns_rto"] = 40, 1
    diag = diagnose_p99(write_run(tmp_path / "r", recs, probes))
    assert [f.check_id for f in diag.findings] == ["p99.net.retransmits"]
    f = diag.findings[0]
    # What each request lived through: the retransmits separate the tail from the body, with the
    # counterfactual percentile without them (analyzers/triage/exposure.py).
    assert f.severity == "high" and f.kind == "differential" and f.coverage >= 0.8, (f.kind, f.coverage)
    assert f.evidence["source"] == "conns_retrans" and "target's connections" in f.title
    assert f.evidence["percentile_without_s"] < f.evidence["percentile_with_s"] and "would be" in f.title


def test_host_wide_retransmits_of_other_flows_are_context_only(tmp_path):
    recs = base_records()
    windows = delay_in_episodes(recs)
    probes = _probes(recs)
    for row in rows_in(probes["tcp"], windows):
        row["Tcp.RetransSegs"], row["TcpExt.TCPTimeouts"] = 40, 2  # other flows; the target's stay at 0
    diag = diagnose_p99(write_run(tmp_path / "r", recs, probes))
    assert diag.findings == []
    assert any("other flows on this host retransmitted 240 segments" in n for n in diag.notes), diag.notes


def test_loopback_target_takes_the_network_out_of_the_path(tmp_path):
    recs = base_records()
    windows = delay_in_episodes(recs)
    probes = _probes(recs)
    for row in rows_in(probes["tcp"], windows):
        row["Tcp.RetransSegs"] = row["conns_retrans"] = 40
    diag = diagnose_p99(write_run(tmp_path / "r", recs, probes, url="http://127.0.0.1:8000"))
    assert diag.findings == []
    detail = {c.check_id: c.detail for c in diag.checks}
    assert "not in its path" in detail["p99.net.retransmits"] and "crosses no NIC" in detail["p99.net.irq-affinity"]


def test_pinned_nic_irqs_are_ranked_first(tmp_path):
    recs = base_records()
    windows = delay_in_episodes(recs)
    probes = _probes(recs)
    for row in probes["irq"]:
        row["nic_busiest_share"], row["nic_busiest_cpu"] = 1.0, 0
    for row in rows_in(probes["irq"], windows):
        row["nic_irq_total"] = 40000  # bursts of traffic, all on cpu0 ...
    for row in rows_in(probes["host"], windows):
        row["cpu_per_core_pct"] = [100.0] + [40.0] * 7  # ... which saturate it
    diag = diagnose_p99(write_run(tmp_path / "r", recs, probes))
    assert [f.check_id for f in diag.findings] == ["p99.net.irq-affinity"]
    f = diag.findings[0]
    assert (
        f.evidence["busiest_core"] == 0
        and f.evidence["busiest_core_cpu_pct_spikes"] > 1.5 * f.evidence["busiest_core_cpu_pct_calm"]
        and f.coverage == 1.0
    )


def test_a_neighbour_behind_a_steady_background_is_named_by_process(tmp_path):
    """On a shared host other processes take 1.2 cores all the time (the aggregate barely moves);
    one process that took 0.8 cores only in the spikes is the neighbour, named by pid and command."""
    recs = base_records()
    windows = delay_in_episodes(recs)
    probes = _probes(recs)
    for row in probes["host"]:
        row["others_cpu_cores"], row["top_others"] = 1.2, [{"pid": 77, "comm": "cc1plus", "cpu_cores": 1.2}]
    for row in rows_in(probes["host"], windows):
        row["others_cpu_cores"] = 1.5  # the background yields to the burner: the sum grows a little
        row["top_others"] = [
            {"pid": 77, "comm": "cc1plus", "cpu_cores": 0.9},
            {"pid": 4242, "comm": "burner", "cpu_cores": 0.8},
        ]
    diag = diagnose_p99(write_run(tmp_path / "r", recs, probes))
    assert [f.check_id for f in diag.findings] == ["p99.host.cpu"], diag.headline
    f = diag.findings[0]
    assert (
        "burner (pid 4242, " in f.title
        and "cores vs 0.00)" in f.title
        and "cc1plus" not in f.title
        and f.coverage == 1.0
    )


def test_the_servers_own_cpu_is_not_a_neighbour(tmp_path):
    recs = base_records()
    windows = delay_in_episodes(recs)
    probes = _probes(recs)
    for row in rows_in(probes["host"], windows):
        row["cpu_pct"], row["server_cpu_cores"] = 100.0, 7.5  # the engine itself on all 8 cores
    diag = diagnose_p99(write_run(tmp_path / "r", recs, probes))
    assert not any(f.check_id == "p99.host.cpu" for f in diag.findings)
    assert any("compute-bound engine (saturation), not a neighbour" in n for n in diag.notes), diag.notes


def test_head_of_line_blocking_is_named_beside_the_long_prompts_own_prefill(tmp_path):
    """One request in ten is a 4,096-token prompt whose own prefill takes 0.5 s, and the short ones
    waiting behind it are held up too: the long prompts are the top of the tail (the P99 is theirs),
    the blocked short ones the rest; both named, nothing else."""
    recs = base_records(long_every=10)
    plant_head_of_line(recs)
    diag = diagnose_p99(write_run(tmp_path / "r", recs, _probes(recs)))
    assert [f.check_id for f in diag.findings] == ["p99.sched.long-prompts", "p99.sched.long-prefill"], diag.headline
    assert "were long prompts" in diag.findings[0].title and "prompts of ~4096 tokens" in diag.findings[0].title


def test_long_prompts_slow_only_by_their_own_prefill_are_not_head_of_line_blocking(tmp_path):
    recs = base_records(long_every=10)  # nobody waits behind them
    diag = diagnose_p99(write_run(tmp_path / "r", recs, _probes(recs)))
    assert [f.check_id for f in diag.findings] == ["p99.sched.long-prompts"], diag.headline
    assert diag.findings[0].next_step.startswith("a long prompt's TTFT is its own prefill")


def test_a_tpot_tail_is_never_the_long_prompts_own_prefill(tmp_path):
    recs = base_records(long_every=10)
    diag = diagnose_p99(write_run(tmp_path / "r", recs, _probes(recs)), metric="tpot")
    assert not any(f.check_id == "p99.sched.long-prompts" for f in diag.findings + diag.context)


def test_preemption_burst_and_playbook_marks(tmp_path):
    recs = base_records()
    windows = delay_in_episodes(recs)
    probes = _probes(recs)
    for row in rows_in(probes["server"], windows):
        row["preemptions"], row["kv_usage"] = 5, 1.0
    diag = diagnose_p99(write_run(tmp_path / "r", recs, probes))
    assert [f.check_id for f in diag.findings] == ["p99.sched.preemption"]
    f = diag.findings[0]
    assert f.kind == "differential" and "preemptions in 6 s with the KV cache at 100%" in f.title, f.title
    assert f.evidence["percentile_without_s"] < f.evidence["percentile_with_s"]
    marks = {s["id"]: s["status"] for s in mark_playbook(diag).to_dict()["steps"]}
    assert marks["p99.sched.preemption"] == "failed" and marks["p99.net.retransmits"] == "passed"
    assert marks["p99.host.gpu-throttle"] == "could not be checked" and marks["p99.net.isolation"] == "manual"


def test_missing_probes_are_unchecked_not_passed(tmp_path):
    recs = base_records()
    diag = diagnose_p99(write_run(tmp_path / "r", recs))
    status = {c.check_id: c.status for c in diag.checks}
    assert status["p99.net.retransmits"] == status["p99.sched.preemption"] == status["p99.host.cpu"] == "unchecked"
    assert status["p99.sched.long-prefill"] == "passed"


def test_cli_prints_the_cause_and_saves_json(tmp_path):
    recs = base_records()
    windows = delay_in_episodes(recs)
    probes = _probes(recs)
    for row in rows_in(probes["tcp"], windows):
        row["Tcp.RetransSegs"] = row["conns_retrans"] = 40
    run = write_run(tmp_path / "r", recs, probes)
    env = dict(os.environ, COLUMNS="200")
    out = subprocess.run(
        [sys.executable, "-m", "llmbench.diag_cli", "p99", str(run.path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "TCP retransmits on the target's connections" in out.stdout and "p99.net.retransmits" in out.stdout
    saved = json.loads((run.path / "diagnosis_p99.json").read_text())
    assert saved["findings"][0]["check_id"] == "p99.net.retransmits" and len(saved["spike_windows"]) == 3
    bad = subprocess.run(
        [sys.executable, "-m", "llmbench.diag_cli", "p99", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 2 and "not a run directory" in bad.stderr and "Traceback" not in bad.stderr
