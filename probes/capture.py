"""`capture` probe: a bounded packet capture (scapy) of the target's TCP port into probes/capture.pcap.

Bounded by packet count and duration (ProbeContext.capture_max_packets / capture_max_s), so a
long sweep cannot fill the disk. `limit_reached` says that one of those limits ended the capture
before the probe ended, and `stopped` which (or that the sniffer ended on its own): the probe
stopping is no limit, nor is a sniffer thread that has not started yet or that died. On loopback, scapy's default socket sees each packet twice; the
plain L2 socket sees it once. There is no libpcap here, so BPF filters are unavailable: the port
is kept by a Python lfilter. Packets are appended and flushed as they arrive.
Rows: one every interval {packets, limit_reached, stopped}; the closing row adds pcap_file and the
`llmdiag pcap` summary (retransmissions, dup_acks, zero_windows, capture_duplicates).
"""

from __future__ import annotations

import os
import time
from urllib.parse import urlparse

from probes.base import Probe, ProbeUnavailable
from probes.tcp import target_port
from rundir import files


def default_iface(url: str | None) -> str | None:
    host = urlparse(url).hostname if url else None
    if host in ("127.0.0.1", "localhost", "::1") or (host or "").startswith("127."):
        return "lo"
    return None  # scapy's default route interface


class CaptureProbe(Probe):
    name = "capture"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.port = ctx.capture_port or target_port(ctx.target_url)
        self.iface = ctx.capture_iface or default_iface(ctx.target_url)
        self.path = ctx.out_dir / files.PROBES_DIR / files.CAPTURE_PCAP
        self.sniffer = None
        self.writer = None
        self.count = 0
        self.stopped: str | None = None  # why the capture ended before the probe did (None: capturing)

    def check(self) -> None:
        if self.port is None:
            raise ProbeUnavailable("no port to capture (give --capture-port or a target URL)")
        if hasattr(os, "geteuid") and os.geteuid() != 0:
            raise ProbeUnavailable("packet capture needs root (or CAP_NET_RAW)")
        try:
            from scapy.config import conf
            from scapy.layers.inet import TCP  # also registers Ethernet/loopback link types for decoding
            from scapy.sendrecv import AsyncSniffer
            from scapy.utils import PcapWriter
        except ImportError as exc:
            raise ProbeUnavailable(f"scapy is not importable ({exc})") from None
        try:
            conf.L2socket(iface=self.iface).close()
        except (OSError, PermissionError) as exc:
            raise ProbeUnavailable(
                f"cannot open a capture socket on {self.iface or 'the default interface'}: {exc}"
            ) from None
        writer = self.writer = PcapWriter(str(self.path), append=False, sync=True)
        port = self.port

        def keep(pkt) -> bool:
            tcp = pkt.getlayer(TCP)
            return tcp is not None and port in (tcp.sport, tcp.dport)

        def write(pkt) -> None:
            writer.write(pkt)
            self.count += 1

        kwargs = {"iface": self.iface} if self.iface else {}
        # AsyncSniffer takes no timeout (scapy 2.6+): the duration limit is enforced by sample().
        self.sniffer = AsyncSniffer(
            L2socket=conf.L2socket, lfilter=keep, prn=write, store=False, count=self.ctx.capture_max_packets, **kwargs
        )
        self.started = time.monotonic()
        self.sniffer.start()

    def sample(self) -> dict:
        if self.stopped is None:
            self.stopped = self._why_stopped()
        return {
            "t": time.time(),
            "packets": self.count,
            "limit_reached": self.stopped is not None and self.stopped.endswith(" limit"),
            "stopped": self.stopped,
        }

    def _why_stopped(self) -> str | None:
        """The reason the capture is over, or None while it goes on. The sniffer's `running` flag
        is no answer: it is False before its thread has started, and after the thread ended for
        any reason; it was read as "limit reached" (48 packets of a 20,000 limit)."""
        limit = self.ctx.capture_max_packets
        if limit and self.count >= limit:
            return "packet limit"  # the sniffer stopped itself on its count
        thread = self.sniffer.thread if self.sniffer is not None else None
        if thread is not None and not thread.is_alive():
            why = getattr(self.sniffer, "exception", None)
            return "the sniffer ended on its own" + (f" ({type(why).__name__}: {why})" if why else "")
        max_s = self.ctx.capture_max_s
        # At stop the probe ends anyway: a duration limit reached then cut nothing short.
        if max_s is not None and not self.stopping and time.monotonic() - self.started > max_s:
            self._stop_sniffer()
            return "duration limit"
        return None

    def _stop_sniffer(self) -> None:
        if self.sniffer is None:
            return
        try:
            self.sniffer.stop()
        except Exception:  # noqa: BLE001 - it may have stopped on its count limit meanwhile
            pass

    def close(self) -> dict | None:
        if self.sniffer is None:
            return None
        if self.sniffer.running:
            self._stop_sniffer()
        if self.writer is not None:  # opened with the sniffer
            self.writer.close()
        from probes.pcap_analysis import analyze_pcap

        report = analyze_pcap(str(self.path))
        return {
            "packets": self.count,
            "limit_reached": bool(self.stopped and self.stopped.endswith(" limit")),
            "stopped": self.stopped,
            "pcap_file": self.path.name,
            "capture_duplicates": report.capture_duplicates,
            **report.totals(),
        }
