"""`tcp` probe: system-wide TCP retransmission counters as per-interval deltas, and per-connection
retransmits (`ss -tin`) of connections to the target's port.

Row fields: dt_s; one delta per counter in netstat.SNMP_KEYS and NETSTAT_KEYS with the dot kept
(e.g. "Tcp.RetransSegs", "TcpExt.TCPTimeouts"); retrans_rate = RetransSegs / OutSegs and
retrans_per_data = RetransSegs / TCPOrigDataSent for the interval (null when nothing was sent);
and, when a target port is known: conns (connections to it), conns_retrans_total (sum of their
lifetime retransmits), conns_lost, conns_rtt_ms_max, conns_rtt_ms_mean, conns_with_retrans (up to
10 {local, peer, retrans_total, rtt_ms} with retransmits); and the target's own share of this
interval: conns_retrans (retransmits on the target's connections since the last sample: the
growth of each connection's total, a new connection counted whole), conns_rto (connections seen
in RTO backoff) and conns_backoff_max. The P99 diagnosis blames the network on these, because the
host-wide counters also count every other flow on the host.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

from probes.base import Probe, ProbeUnavailable, read_text
from probes.netstat import NETSTAT_KEYS, SNMP_KEYS, parse_counter_pairs, parse_ss


def target_port(url: str | None) -> int | None:
    if not url:
        return None
    u = urlparse(url)
    try:
        return u.port or (443 if u.scheme == "https" else 80)
    except ValueError:
        return None


class TcpProbe(Probe):
    name = "tcp"

    def __init__(self, ctx, proc: str = "/proc"):
        super().__init__(ctx)
        self.proc = Path(proc)
        self.port = target_port(ctx.target_url)
        self.ss = shutil.which("ss")
        self._prev: dict[str, int] | None = None
        self._prev_t = 0.0
        self._ss_warned = False
        self._conn_prev: dict[tuple[str, str], int] | None = None  # (local, peer) -> retrans_total

    def check(self) -> None:
        if not sys.platform.startswith("linux"):
            raise ProbeUnavailable(f"needs Linux /proc/net (this is {sys.platform})")
        try:
            self._counters()
        except OSError as exc:
            raise ProbeUnavailable(f"cannot read {self.proc}/net/snmp: {exc.strerror or exc}") from None
        if self.port is not None and self.ss:
            self._connections({}, self.ss)  # baseline: connections already open count from here, new ones whole

    def _counters(self) -> dict[str, int]:
        values = parse_counter_pairs(read_text(self.proc / "net/snmp"))
        try:
            values.update(parse_counter_pairs(read_text(self.proc / "net/netstat")))
        except OSError:
            pass  # older kernels / containers: the Tcp: counters still tell retransmits
        return values

    def sample(self) -> dict | None:
        now = time.time()
        cur = self._counters()
        prev, prev_t = self._prev, self._prev_t
        self._prev, self._prev_t = cur, now
        if prev is None:
            return None
        row: dict = {"t": now, "dt_s": round(now - prev_t, 4)}
        for key in SNMP_KEYS + NETSTAT_KEYS:
            if key in cur and key in prev:
                row[key] = max(cur[key] - prev[key], 0)
        out, retr, data = row.get("Tcp.OutSegs"), row.get("Tcp.RetransSegs"), row.get("TcpExt.TCPOrigDataSent")
        row["retrans_rate"] = round(retr / out, 6) if out and retr is not None else None
        row["retrans_per_data"] = round(retr / data, 6) if data and retr is not None else None
        if self.port is not None and self.ss:
            self._connections(row, self.ss)
        return row

    def _connections(self, row: dict, ss: str) -> None:
        try:
            res = subprocess.run(
                [ss, "-tinH", "state", "established", f"( dport = :{self.port} )"],
                capture_output=True,
                text=True,
                timeout=5,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            if not self._ss_warned:
                row["ss_error"] = str(exc)
                self._ss_warned = True
            return
        conns = parse_ss(res.stdout)
        rtts = [c["rtt_ms"] for c in conns if "rtt_ms" in c]
        row["conns"] = len(conns)
        row["conns_retrans_total"] = sum(c.get("retrans_total", 0) for c in conns)
        row["conns_lost"] = sum(c.get("lost", 0) for c in conns)
        row["conns_rtt_ms_max"] = max(rtts) if rtts else None
        row["conns_rtt_ms_mean"] = round(sum(rtts) / len(rtts), 3) if rtts else None
        totals = {(c["local"], c["peer"]): c.get("retrans_total", 0) for c in conns}
        if self._conn_prev is not None:
            row["conns_retrans"] = sum(max(v - self._conn_prev.get(k, 0), 0) for k, v in totals.items())
        self._conn_prev = totals
        backoff = [c.get("backoff", 0) for c in conns]
        row["conns_rto"] = sum(1 for b in backoff if b > 0)
        row["conns_backoff_max"] = max(backoff, default=0)
        bad = sorted((c for c in conns if c.get("retrans_total")), key=lambda c: -c["retrans_total"])[:10]
        row["conns_with_retrans"] = [{k: c.get(k) for k in ("local", "peer", "retrans_total", "rtt_ms")} for c in bad]
