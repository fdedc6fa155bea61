"""TCP health of a pcap, per flow, with Wireshark's definitions (tcp.analysis.*):

- retransmission: a segment that carries payload (or SYN/FIN) whose sequence number is below the
  highest sequence + length already seen in that direction, and is not a keep-alive;
  fast_retransmission when at least two duplicate ACKs for that sequence came first;
  spurious_retransmission when the peer had already acknowledged it.
- keep-alive: payload of 0 or 1 byte at sequence = next expected − 1 (not counted as retransmission).
- duplicate ACK: no payload, no SYN/FIN/RST, same ACK number and same window as the previous
  segment of that direction, window not zero.
- zero window: advertised window 0 on a segment without SYN/FIN/RST.

Loopback captures taken without care see each packet twice: an identical IP packet within
DUPLICATE_WINDOW_S of its twin is dropped as a capture duplicate (a real retransmission has a
new IP id and comes at least an RTO or a few duplicate ACKs later).
The file is read by a small classic-pcap reader so a truncated file is detected exactly: what
was read is analysed and `truncated` says where it stopped. pcapng is refused with a message.
"""

from __future__ import annotations

import struct
from dataclasses import asdict, dataclass, field
from typing import Any

from probes.base import ProbeInputError

DUPLICATE_WINDOW_S = 0.002
_MAGIC = {
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6),
    b"\xa1\xb2\xc3\xd4": (">", 1e-6),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9),
    b"\xa1\xb2\x3c\x4d": (">", 1e-9),
}


@dataclass
class FlowStats:
    flow: str  # "src:port > dst:port"
    packets: int = 0
    data_packets: int = 0
    payload_bytes: int = 0
    retransmissions: int = 0  # all of them, fast and spurious included
    fast_retransmissions: int = 0
    spurious_retransmissions: int = 0
    dup_acks: int = 0
    zero_windows: int = 0
    keepalives: int = 0


@dataclass
class PcapReport:
    packets_read: int = 0
    tcp_packets: int = 0
    capture_duplicates: int = 0
    truncated: str | None = None  # why reading stopped early, or None
    flows: list[FlowStats] = field(default_factory=list)

    def totals(self) -> dict:
        keys = (
            "retransmissions",
            "fast_retransmissions",
            "spurious_retransmissions",
            "dup_acks",
            "zero_windows",
            "keepalives",
            "data_packets",
        )
        return {k: sum(getattr(f, k) for f in self.flows) for k in keys}

    def to_dict(self) -> dict:
        return {
            **{k: v for k, v in asdict(self).items() if k != "flows"},
            "totals": self.totals(),
            "flows": [asdict(f) for f in self.flows],
        }


@dataclass
class _Dir:
    stats: FlowStats
    next_seq: int | None = None  # highest seq + len seen
    max_ack: int | None = None  # highest ACK this side sent (acknowledges the other side)
    last_ack: int | None = None
    last_win: int | None = None
    dup_ack_count: int = 0  # consecutive duplicate ACKs for last_ack


def read_pcap(path: str):
    """Yield (time_s, linktype, frame bytes); sets .truncated on the generator's report via StopIteration value."""
    with open(path, "rb") as f:
        head = f.read(24)
        if head[:4] == b"\x0a\x0d\x0d\x0a":
            raise ProbeInputError(f"{path} is pcapng; convert it with `editcap -F pcap {path} out.pcap`")
        if len(head) < 24 or head[:4] not in _MAGIC:
            raise ProbeInputError(f"{path} is not a pcap file (bad or missing header)")
        endian, tick = _MAGIC[head[:4]]
        linktype = struct.unpack(endian + "I", head[20:24])[0] & 0x0FFFFFFF
        n = 0
        while True:
            rec = f.read(16)
            if not rec:
                return None
            if len(rec) < 16:
                return f"record header of packet {n + 1} is cut short"
            sec, frac, caplen, _wirelen = struct.unpack(endian + "IIII", rec)
            if caplen > 1 << 18:
                return f"packet {n + 1} claims {caplen} bytes: the file is corrupt from there"
            data = f.read(caplen)
            if len(data) < caplen:
                return f"packet {n + 1} is cut short ({len(data)} of {caplen} bytes)"
            n += 1
            yield sec + frac * tick, linktype, data


def analyze_pcap(path: str) -> PcapReport:
    from scapy.config import conf
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6

    report = PcapReport()
    dirs: dict[tuple, _Dir] = {}
    recent: dict[bytes, float] = {}
    gen = read_pcap(path)
    while True:
        try:
            t, linktype, data = next(gen)
        except StopIteration as stop:
            report.truncated = stop.value
            break
        report.packets_read += 1
        # scapy annotates Num2Layer.get as returning a number; for a link type it returns the layer class.
        cls: Any = conf.l2types.get(linktype)
        try:
            pkt = cls(data) if cls else IP(data)
        except Exception:  # noqa: BLE001 - a malformed frame is skipped, not fatal
            continue
        ip = pkt.getlayer(IP) or pkt.getlayer(IPv6)
        if ip is None or TCP not in ip:
            continue
        raw_ip = bytes(ip)
        twin = recent.get(raw_ip)
        if twin is not None and abs(t - twin) <= DUPLICATE_WINDOW_S:
            report.capture_duplicates += 1
            continue
        recent[raw_ip] = t
        if len(recent) > 4096:
            recent = {k: v for k, v in recent.items() if t - v <= DUPLICATE_WINDOW_S}
        report.tcp_packets += 1
        _account(dirs, ip, ip[TCP])
    report.flows = sorted(
        (d.stats for d in dirs.values()),
        key=lambda s: (-s.retransmissions, -s.dup_acks, -s.zero_windows, -s.packets, s.flow),
    )
    return report


def _payload_len(ip, tcp) -> int:
    # From the IP lengths, not len(payload): Ethernet padding of short frames is not TCP data.
    if hasattr(ip, "ihl") and ip.ihl is not None:
        total, ip_hdr = ip.len, ip.ihl * 4
    else:
        total, ip_hdr = ip.plen + 40, 40
    return max(total - ip_hdr - tcp.dataofs * 4, 0)


def _directions(dirs: dict, ip, tcp) -> tuple[_Dir, _Dir | None]:
    """This segment's direction (created on its first segment) and the opposite one, if seen yet."""
    key = (ip.src, tcp.sport, ip.dst, tcp.dport)
    d = dirs.get(key)
    if d is None:
        d = dirs[key] = _Dir(FlowStats(flow=f"{ip.src}:{tcp.sport} > {ip.dst}:{tcp.dport}"))
    return d, dirs.get((ip.dst, tcp.dport, ip.src, tcp.sport))


def _count_retransmission(s: FlowStats, next_seq: int, peer: _Dir | None, seq: int, seglen: int) -> None:
    """A segment starting below what this side already sent; spurious when the peer had already
    acknowledged all of it, fast when two duplicate ACKs asked for it first."""
    if _seq_diff(seq, next_seq) >= 0:
        return
    s.retransmissions += 1
    if peer is None:
        return
    if peer.max_ack is not None and _seq_diff(seq + seglen, peer.max_ack) <= 0:
        s.spurious_retransmissions += 1
    elif peer.dup_ack_count >= 2 and peer.last_ack == seq:
        s.fast_retransmissions += 1


def _track_ack(d: _Dir, ack: int, window: int, dup_ack: bool) -> None:
    if dup_ack:
        d.stats.dup_acks += 1
        d.dup_ack_count += 1
    elif d.last_ack != ack:
        d.dup_ack_count = 0
    d.last_ack, d.last_win = ack, window
    if d.max_ack is None or _seq_diff(ack, d.max_ack) > 0:
        d.max_ack = ack


def _account(dirs: dict, ip, tcp) -> None:
    d, peer = _directions(dirs, ip, tcp)
    s = d.stats
    flags = int(tcp.flags)
    syn, fin, rst, ack_flag = flags & 0x02, flags & 0x01, flags & 0x04, flags & 0x10
    control = syn or fin or rst
    plen = _payload_len(ip, tcp)
    seglen = plen + (1 if syn else 0) + (1 if fin else 0)
    seq = tcp.seq
    s.packets += 1
    if plen:
        s.data_packets += 1
        s.payload_bytes += plen
    if tcp.window == 0 and not control:
        s.zero_windows += 1
    keepalive = d.next_seq is not None and plen <= 1 and not control and _seq_diff(seq, d.next_seq) == -1
    if keepalive:
        s.keepalives += 1
    elif d.next_seq is not None and seglen and not rst:
        _count_retransmission(s, d.next_seq, peer, seq, seglen)
    # Wireshark's duplicate ACK also needs seq == next expected (a keep-alive is not one).
    dup_ack = (
        ack_flag
        and seglen == 0
        and not rst
        and not keepalive
        and d.next_seq == seq
        and d.last_ack == tcp.ack
        and d.last_win == tcp.window
        and tcp.window != 0
    )
    end = (seq + seglen) & 0xFFFFFFFF
    if not keepalive and (d.next_seq is None or _seq_diff(end, d.next_seq) > 0):
        d.next_seq = end
    if ack_flag:
        _track_ack(d, tcp.ack, tcp.window, bool(dup_ack))


def _seq_diff(a: int, b: int) -> int:
    """a − b in 32-bit sequence space (negative when a is before b)."""
    return ((a - b + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
