"""pcap analysis: a capture built with scapy with known retransmissions, duplicate ACKs, zero
windows and keep-alives is counted exactly; loopback double capture, truncation, other formats."""

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap
from typer.testing import CliRunner

from llmbench.diag_cli import app
from probes.base import ProbeInputError
from probes.pcap_analysis import analyze_pcap

C, S = ("10.0.0.1", 40000), ("10.0.0.2", 8000)


def _seg(src, dst, flags, seq, ack=0, data=b"", win=1000, ip_id=1):
    pkt = (
        Ether()
        / IP(src=src[0], dst=dst[0], id=ip_id)
        / TCP(sport=src[1], dport=dst[1], flags=flags, seq=seq, ack=ack, window=win)
    )
    return pkt / Raw(data) if data else pkt


def _conversation():
    d = b"x" * 100
    pkts = [
        _seg(C, S, "S", 1000),
        _seg(S, C, "SA", 5000, 1001),
        _seg(C, S, "A", 1001, 5001),
        _seg(C, S, "PA", 1001, 5001, d, ip_id=2),
        _seg(C, S, "PA", 1101, 5001, d, ip_id=3),
        _seg(C, S, "PA", 1201, 5001, d, ip_id=4),
        _seg(S, C, "A", 5001, 1101),
        _seg(S, C, "A", 5001, 1101),  # duplicate ACK 1
        _seg(S, C, "A", 5001, 1101),  # duplicate ACK 2
        _seg(C, S, "PA", 1101, 5001, d, ip_id=5),  # fast retransmission
        _seg(S, C, "A", 5001, 1301, win=0),  # zero window 1 (new ACK: not a duplicate)
        _seg(S, C, "A", 5001, 1301, win=0),  # zero window 2 (window 0: not a duplicate)
        _seg(S, C, "A", 5001, 1301, win=2000),  # window update
        _seg(C, S, "PA", 1001, 5001, d, ip_id=6),  # spurious retransmission (already acknowledged)
        _seg(C, S, "A", 1300, 5001),  # keep-alive, no payload
        _seg(C, S, "A", 1300, 5001, b"\0"),  # keep-alive, one byte
        _seg(S, C, "PA", 5001, 1301, b"y" * 50, win=2000),
        _seg(C, S, "A", 1301, 5051),
    ]
    for i, p in enumerate(pkts):
        p.time = 1000.0 + i * 0.05
    return pkts


def test_known_counts(tmp_path):
    path = tmp_path / "known.pcap"
    wrpcap(str(path), _conversation())
    r = analyze_pcap(str(path))
    t = r.totals()
    assert (t["retransmissions"], t["fast_retransmissions"], t["spurious_retransmissions"]) == (2, 1, 1)
    assert t["dup_acks"] == 2 and t["zero_windows"] == 2 and t["keepalives"] == 2
    assert r.capture_duplicates == 0 and r.truncated is None and r.tcp_packets == 18
    worst = r.flows[0]
    assert worst.flow == "10.0.0.1:40000 > 10.0.0.2:8000" and worst.retransmissions == 2


def test_loopback_double_capture_is_not_a_retransmission(tmp_path):
    doubled = []
    for p in _conversation():
        twin = p.copy()
        twin.time = p.time + 0.00001
        doubled += [p, twin]
    path = tmp_path / "double.pcap"
    wrpcap(str(path), doubled)
    r = analyze_pcap(str(path))
    assert r.capture_duplicates == 18 and r.totals()["retransmissions"] == 2 and r.totals()["dup_acks"] == 2


def test_truncated_file_keeps_partial_results(tmp_path):
    path = tmp_path / "cut.pcap"
    wrpcap(str(path), _conversation())
    data = path.read_bytes()
    path.write_bytes(data[:-30])
    r = analyze_pcap(str(path))
    assert r.truncated and "cut short" in r.truncated and r.packets_read == 17
    assert r.totals()["retransmissions"] == 2
    res = CliRunner().invoke(app, ["pcap", str(path)], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "truncated" in res.output and "2 retransmissions" in res.output


def test_not_a_pcap(tmp_path):
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"hello, this is not a capture file at all")
    with pytest.raises(ProbeInputError, match="not a pcap"):
        analyze_pcap(str(bad))
    ng = tmp_path / "x.pcapng"
    ng.write_bytes(b"\x0a\x0d\x0d\x0a" + b"\0" * 40)
    with pytest.raises(ProbeInputError, match="pcapng"):
        analyze_pcap(str(ng))
    res = CliRunner().invoke(app, ["pcap", str(bad)])
    assert res.exit_code == 2 and "not a pcap" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(app, ["pcap", str(tmp_path / "missing.pcap")])
    assert res.exit_code == 2 and "no such file" in " ".join(res.output.split())  # rich wraps long paths
