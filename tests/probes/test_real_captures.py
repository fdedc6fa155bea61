"""The probes' parsers on real captures (tests/probes/data/real/README.md names each source)."""

from pathlib import Path

from probes.base import ProbeContext
from probes.interrupts import delta_lines, parse_interrupts, summarize
from probes.netstat import parse_ss
from probes.prom import parse_metrics
from probes.server import ServerProbe

REAL = Path(__file__).parent / "data" / "real"


def _read(name: str) -> str:
    return (REAL / name).read_text()


def test_sglang_documented_page():
    s = parse_metrics(_read("sglang_docs_metrics.txt"))
    assert s.engine == "sglang" and s.values["kv_usage"] == 0.28
    assert s.values["running"] == 162 and s.values["waiting"] == 2826
    assert s.histograms["ttft"].count == 11008 and s.values["prefix_cache_hit_rate_gauge"] > 0


def test_sglang_retracted_gauge_is_not_a_preemption_counter(tmp_path):
    """`num_retracted_reqs` is the latest batch's retracted requests (a gauge); the counter is
    `num_retracted_requests_total`. The probe reports both, and differences only the counter."""
    text = _read("sglang_0517_saturated.txt")
    s = parse_metrics(text)
    assert s.values["retracted"] == 1.0 and s.values["preemptions_total"] == 48.0
    probe = ServerProbe(ProbeContext(out_dir=tmp_path, target_url="http://127.0.0.1:9"))
    first = probe.row_from_text(text, 100.0)
    later = probe.row_from_text(
        text.replace("num_retracted_requests_total 48.0", "num_retracted_requests_total 50.0"), 101.0
    )
    assert first["retracted"] == 1.0 and first["preemptions_total"] == 48.0
    assert later["preemptions"] == 2.0 and later["retracted"] == 1.0 and later["kv_usage"] == 0.85


def test_vllm_v0_page_behind_process_metrics():
    s = parse_metrics(_read("vllm_router_v0_metrics.txt"))
    assert s.engine == "vllm" and s.values == {"kv_usage": 0.0, "running": 0.0, "waiting": 0.0}


def test_ss_without_state_column_and_mapped_addresses():
    (c,) = parse_ss(_read("ss_container_tin.txt"))
    assert c["local"] == "[::ffff:10.10.0.2]:80" and c["peer"] == "[::ffff:10.10.0.3]:59498"
    assert c["retrans_total"] == 8 and c["backoff"] == 1 and c["rto_ms"] == 220


def test_ss_from_a_lossy_namespace():
    (c,) = parse_ss(_read("ss_netns_tin.txt"))
    assert c["state"] == "ESTAB" and c["peer"] == "10.0.2.2:8080"
    assert c["retrans_total"] == 5 and c["lost"] == 3 and c["backoff"] == 1 and c["rto_ms"] == 5852


def test_ss_with_a_netid_column():
    (c,) = parse_ss(_read("ss_i_netid.txt"))
    assert c["state"] == "ESTAB" and c["local"] == "10.0.0.4:33096" and c["peer"] == "10.0.0.3:9527"
    assert c["retrans_total"] == 11061 and c["lost"] == 12


def test_interrupts_all_nic_queues_on_one_cpu():
    ncpu, lines = parse_interrupts(_read("interrupts_eth0_pinned.txt"))
    assert ncpu == 4
    nic = [ln for ln in lines if ln.nic]
    assert {ln.name for ln in nic} == {"eth0-TxRx-0", "eth0-TxRx-1", "eth0-TxRx-2", "eth0-TxRx-3"}
    s = summarize(ncpu, delta_lines([], lines))
    assert s["nic_busiest_cpu"] == 0 and s["nic_busiest_share"] == 1.0


def test_interrupts_msix_names_with_edge_token():
    ncpu, lines = parse_interrupts(_read("interrupts_igb_msix_grep.txt"))
    assert ncpu == 2 and [ln.name for ln in lines][1] == "enp2s0-TxRx-0"
    s = summarize(ncpu, delta_lines([], lines))
    assert s["nic_irq_per_cpu"] == [0, 12] and s["nic_busiest_share"] == 1.0
