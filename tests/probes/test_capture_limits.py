"""The capture probe's `limit_reached` means a limit ended the capture: not the probe stopping (a
last row said limit_reached at 48 packets of a 20,000 limit), nor a sniffer that ended on its own
or had not started yet. Live on loopback (needs root or CAP_NET_RAW, and scapy)."""

from __future__ import annotations

import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from probes.base import ProbeContext, ProbeUnavailable, read_rows
from probes.capture import CaptureProbe
from probes.runner import ProbeSet


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"hello")

    def log_message(self, *args):
        pass


@pytest.fixture
def target():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def _traffic(url: str, n: int) -> None:
    for _ in range(n):
        with urllib.request.urlopen(url + "/", timeout=5) as r:
            r.read()


def _started(ctx: ProbeContext) -> CaptureProbe:
    (ctx.out_dir / "probes").mkdir(exist_ok=True)
    probe = CaptureProbe(ctx)
    try:
        probe.check()
    except ProbeUnavailable as exc:
        pytest.skip(f"capture cannot run here: {exc}")
    return probe


def test_the_probe_stopping_is_no_limit(tmp_path, target):
    # As `llmdiag probe` had it: a duration limit no longer than the recording. The interval is
    # long, so no tick falls between the start and the stop (a tick after the limit would rightly
    # say the limit ended the capture): the rows are the first one, then the last sample and the
    # closing row, written while the probe stops, when a passed duration limit cut nothing short.
    ctx = ProbeContext(out_dir=tmp_path, target_url=target, interval_s=300.0, capture_max_s=0.2)
    pset = ProbeSet(["capture"], ctx, log=lambda _m: None)
    status = pset.start()["capture"]
    if status != "ok":
        pytest.skip(f"capture cannot run here: {status}")
    time.sleep(0.3)  # the sniffer thread opens its socket; the duration limit passes
    _traffic(target, 3)
    pset.stop()
    rows = read_rows(tmp_path / "probes" / "capture.jsonl")
    assert len(rows) == 3, rows
    assert rows[-1]["packets"] > 0 and rows[-1]["pcap_file"] == "capture.pcap"
    assert not any(r["limit_reached"] for r in rows), rows  # the last sample used to say True
    assert all(r["stopped"] is None for r in rows)


def test_a_sniffer_that_ended_on_its_own_is_no_limit(tmp_path, target):
    probe = _started(ProbeContext(out_dir=tmp_path, target_url=target, capture_max_s=None))
    assert probe.sample()["limit_reached"] is False  # its thread may not have started yet
    time.sleep(0.3)
    probe.sniffer.stop()  # its socket went away, say
    row = probe.sample()
    assert row["limit_reached"] is False and row["stopped"].startswith("the sniffer ended on its own")
    assert probe.close()["limit_reached"] is False


def test_the_packet_limit_is_a_limit(tmp_path, target):
    probe = _started(ProbeContext(out_dir=tmp_path, target_url=target, capture_max_packets=10))
    time.sleep(0.3)  # the sniffer thread opens its socket
    _traffic(target, 4)  # well over 10 packets
    probe.sniffer.thread.join(timeout=5)  # it stops itself at its count
    row = probe.sample()
    assert row == row | {"packets": 10, "limit_reached": True, "stopped": "packet limit"}
    last = probe.close()
    assert last["limit_reached"] is True and last["packets"] == 10
