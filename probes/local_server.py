"""The process behind a local target: which process listens on the target URL's port.

The host and stacks probes separate the server's own CPU from its neighbours' only when they know
the server's pid. For the embedded engine the sweep knows it; for a `--target` on this host the
user may not give `--server-pid`, and then a CPU neighbour is indistinguishable from the server
itself (both are "other processes"). A socket listening on the target's port, on the target's
address or on every address, names the process. A target on another host, in another network
namespace, or whose socket this user may not see, has none: None, and the probes say so as before.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlparse

import psutil

ANY_ADDRESS = ("0.0.0.0", "::", "")


def listening_pid(url: str) -> int | None:
    u = urlparse(url)
    port = u.port or (443 if u.scheme == "https" else 80)
    addresses = _local_addresses(u.hostname or "")
    if not addresses:
        return None
    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.AccessDenied, OSError):
        return None
    for c in conns:
        if (
            c.status == psutil.CONN_LISTEN
            and c.laddr
            and c.laddr.port == port
            and c.pid
            and (c.laddr.ip in addresses or c.laddr.ip in ANY_ADDRESS)
        ):
            return c.pid
    return None


def _local_addresses(host: str) -> set[str]:
    """The target's addresses when they are this host's own (loopback or an interface's); else empty."""
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return set()
    resolved = {str(i[4][0]) for i in infos}  # the address of each (IPv4 and IPv6 alike: a str)
    mine = {a.address for addrs in psutil.net_if_addrs().values() for a in addrs}
    return {a for a in resolved if ipaddress.ip_address(a.split("%")[0]).is_loopback or a in mine}
