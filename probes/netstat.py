"""Parsers for TCP counters: /proc/net/snmp and /proc/net/netstat (header line + value line per
protocol prefix), and `ss -tin` per-connection info (retrans:cur/total, rtt:avg/var, lost, ...).
Pure functions; garbage lines are skipped.
"""

from __future__ import annotations

import re

# Counters the tcp probe turns into per-interval deltas. Names as the kernel writes them.
SNMP_KEYS = (
    "Tcp.OutSegs",
    "Tcp.InSegs",
    "Tcp.RetransSegs",
    "Tcp.InErrs",
    "Tcp.OutRsts",
    "Tcp.ActiveOpens",
    "Tcp.PassiveOpens",
    "Tcp.AttemptFails",
    "Tcp.EstabResets",
)
NETSTAT_KEYS = (
    "TcpExt.TCPOrigDataSent",
    "TcpExt.TCPTimeouts",
    "TcpExt.TCPLostRetransmit",
    "TcpExt.TCPSynRetrans",
    "TcpExt.TCPFastRetrans",
    "TcpExt.TCPSlowStartRetrans",
    "TcpExt.TCPLossProbes",
    "TcpExt.TCPSpuriousRTOs",
    "TcpExt.TCPRetransFail",
    "TcpExt.TCPBacklogDrop",
    "TcpExt.ListenOverflows",
    "TcpExt.ListenDrops",
    "TcpExt.TCPDSACKRecv",
    "TcpExt.TCPRcvQDrop",
    "TcpExt.TCPZeroWindowDrop",
    "TcpExt.TCPToZeroWindowAdv",
    "TcpExt.TCPFromZeroWindowAdv",
)


def parse_counter_pairs(text: str) -> dict[str, int]:
    """'Tcp: A B C\\nTcp: 1 2 3' -> {"Tcp.A": 1, ...}. Works for /proc/net/snmp and /proc/net/netstat."""
    out: dict[str, int] = {}
    header: tuple[str, list[str]] | None = None
    for line in text.splitlines():
        prefix, sep, rest = line.partition(":")
        if not sep:
            header = None
            continue
        tokens = rest.split()
        if (
            header is not None
            and header[0] == prefix
            and len(header[1]) == len(tokens)
            and tokens
            and all(_is_int(t) for t in tokens)
        ):
            for key, value in zip(header[1], tokens):
                out[f"{prefix}.{key}"] = int(value)
            header = None
        else:
            header = (prefix, tokens)
    return out


def _is_int(tok: str) -> bool:
    return tok.lstrip("-").isdigit()


_SS_FIELD = re.compile(
    r"\b(retrans|rtt|lost|bytes_retrans|cwnd|unacked|rto|backoff|bytes_acked|bytes_received)"
    r":([\d.]+)(?:/([\d.]+))?"
)


_NETIDS = {"tcp", "tcp6", "mptcp", "udp", "raw", "sctp"}


def parse_ss(text: str) -> list[dict]:
    """`ss -tin` (with or without header) -> one dict per connection: local, peer, state, and
    retrans_current, retrans_total, rtt_ms, rttvar_ms, lost, bytes_retrans, cwnd, rto_ms, and backoff
    (the RTO backoff exponent: > 0 while the connection is recovering from a retransmission timeout)."""
    conns: list[dict] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith(("State", "Recv-Q", "Netid")):
            continue
        if line[0] in " \t":
            if conns:
                _ss_info(conns[-1], line)
            continue
        parts = line.split()
        if len(parts) >= 6 and parts[0] in _NETIDS:
            parts = parts[1:]  # `ss -i` without -t prints the Netid column first
        # "ESTAB 0 0 local peer" (with state) or "0 0 local peer" (with a state filter)
        if len(parts) >= 5 and not parts[0].isdigit():
            state, local, peer = parts[0], parts[3], parts[4]
        elif len(parts) >= 4:
            state, local, peer = None, parts[2], parts[3]
        else:
            continue
        conns.append({"state": state, "local": local, "peer": peer})
    return conns


def _ss_info(conn: dict, line: str) -> None:
    for key, a, b in _SS_FIELD.findall(line):
        try:
            if key == "retrans":
                conn["retrans_current"] = int(float(a))
                conn["retrans_total"] = int(float(b)) if b else int(float(a))
            elif key == "rtt":
                conn["rtt_ms"] = float(a)
                if b:
                    conn["rttvar_ms"] = float(b)
            elif key == "rto":
                conn["rto_ms"] = float(a)
            else:
                conn[key] = int(float(a))
        except ValueError:
            continue


def port_of(address: str) -> int | None:
    """'[::ffff:127.0.0.1]:8000' or '127.0.0.1:8000' -> 8000."""
    _, sep, port = address.rpartition(":")
    return int(port) if sep and port.isdigit() else None
