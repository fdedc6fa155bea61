"""Live: host, irq, tcp, capture and stacks probes against real processes and traffic on loopback."""

import os
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from process_state import ProcessState, assert_unchanged

from probes.base import ProbeContext, ProbeUnavailable
from probes.capture import CaptureProbe
from probes.host import HostProbe
from probes.irq import IrqProbe
from probes.pcap_analysis import analyze_pcap
from probes.runner import ProbeSet
from probes.stacks import StacksProbe
from probes.tcp import TcpProbe


class _Hello(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"x" * 20000
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def loopback_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def _traffic(url, n=20):
    for _ in range(n):
        with urllib.request.urlopen(url + "/", timeout=5) as r:
            r.read()


def test_tcp_probe_sees_loopback_traffic_and_connections(tmp_path, loopback_server):
    probe = TcpProbe(ProbeContext(out_dir=tmp_path, target_url=loopback_server))
    probe.check()
    assert probe.sample() is None  # baseline
    _traffic(loopback_server)
    row = probe.sample()
    assert row["Tcp.OutSegs"] >= 40 and row["Tcp.ActiveOpens"] >= 20 and row["dt_s"] > 0
    assert row["retrans_rate"] is not None and 0 <= row["retrans_rate"] < 1
    # a connection held open to the target is listed by ss
    host, port = loopback_server.rsplit(":", 1)
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=5)
    conn.request("GET", "/")
    conn.getresponse().read()
    row = probe.sample()
    conn.close()
    assert row["conns"] >= 1 and row["conns_retrans_total"] == 0 and row["conns_rtt_ms_max"] is not None


def test_host_probe_follows_a_busy_server_process(tmp_path):
    busy = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<20: pass"])
    try:
        probe = HostProbe(ProbeContext(out_dir=tmp_path, server_pid=busy.pid))
        probe.check()
        assert probe.sample() is None
        time.sleep(1.0)
        row = probe.sample()
        assert len(row["cpu_per_core_pct"]) == os.cpu_count() and 0 <= row["cpu_pct"] <= 100
        assert row["server_pid"] == busy.pid and row["server_cpu_cores"] > 0.2  # a spinning loop (shared CPUs)
        assert row["server_rss_bytes"] > 1 << 20 and row["mem_used_bytes"] > 0 and row["load1"] >= 0
        assert row["server_numa_node"] == "0" and row["server_cpus_allowed"]
    finally:
        busy.kill()
        busy.wait()
    row = probe.sample()
    assert row["server_gone"] is True and "cpu_pct" in row  # the host series goes on


def test_irq_probe_on_this_machine(tmp_path):
    probe = IrqProbe(ProbeContext(out_dir=tmp_path))
    probe.check()
    assert probe.sample() is None
    time.sleep(0.3)
    row = probe.sample()
    assert row["ncpu"] == os.cpu_count() and len(row["irq_per_cpu"]) == os.cpu_count()
    assert "nic_affinity" in row  # this VM's virtio-net queues, with their affinity lists
    assert all(v["affinity"] for v in row["nic_affinity"].values())


def test_unreadable_proc_is_a_clear_unavailable(tmp_path):
    for probe in (
        IrqProbe(ProbeContext(out_dir=tmp_path), proc=str(tmp_path / "noproc")),
        TcpProbe(ProbeContext(out_dir=tmp_path), proc=str(tmp_path / "noproc")),
        HostProbe(ProbeContext(out_dir=tmp_path), proc=str(tmp_path / "noproc")),
    ):
        with pytest.raises(ProbeUnavailable, match="cannot read"):
            probe.check()


def test_capture_on_loopback_sees_each_packet_once(tmp_path, loopback_server):
    (tmp_path / "probes").mkdir()
    ctx = ProbeContext(out_dir=tmp_path, target_url=loopback_server, capture_max_packets=5000, capture_max_s=30)
    probe = CaptureProbe(ctx)
    probe.check()
    time.sleep(0.5)  # the sniffer thread opens its socket
    _traffic(loopback_server, n=5)
    time.sleep(0.5)
    assert probe.sample()["packets"] > 0
    last = probe.close()
    assert last["pcap_file"] == "capture.pcap" and last["packets"] >= 5 * 6
    report = analyze_pcap(str(tmp_path / "probes" / "capture.pcap"))
    assert report.capture_duplicates == 0 and report.totals()["retransmissions"] == 0
    assert report.tcp_packets == last["packets"]


def test_stacks_probe_dumps_a_real_process(tmp_path):
    (tmp_path / "probes").mkdir()
    code = "import time\ndef serve_forever_here():\n    time.sleep(60)\nserve_forever_here()\n"
    target = subprocess.Popen([sys.executable, "-c", code])
    try:
        time.sleep(1.0)
        probe = StacksProbe(ProbeContext(out_dir=tmp_path, server_pid=target.pid))
        probe.check()
        row = probe.sample()
        frames = [f for th in row["threads"] for f in th["frames"]]
        assert any(f.startswith("serve_forever_here") for f in frames), frames
    finally:
        target.kill()
        target.wait()


def test_stacks_without_a_process_cannot_run(tmp_path):
    with pytest.raises(ProbeUnavailable, match="no local server process"):
        StacksProbe(ProbeContext(out_dir=tmp_path)).check()


def test_a_probe_set_leaves_its_caller_as_it_found_it(tmp_path, loopback_server):
    """Every local probe at once (sampler threads, the sniffer, py-spy children) started and
    stopped through ProbeSet: no thread, child process or signal handler stays behind."""
    code = "import time\ndef serve_forever_here():\n    time.sleep(60)\nserve_forever_here()\n"
    target = subprocess.Popen([sys.executable, "-c", code])
    try:
        before = ProcessState.capture()
        ctx = ProbeContext(
            out_dir=tmp_path,
            target_url=loopback_server,
            server_pid=target.pid,
            interval_s=0.2,
            capture_max_packets=5000,
            capture_max_s=30,
        )
        with ProbeSet(["host", "irq", "tcp", "capture", "stacks"], ctx, log=lambda _m: None) as pset:
            assert set(pset.availability.values()) == {"ok"}, pset.availability
            _traffic(loopback_server, n=3)
            time.sleep(1.0)
        assert_unchanged(before)
    finally:
        target.kill()
        target.wait()
