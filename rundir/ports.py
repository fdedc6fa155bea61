"""A free loopback port: the one helper everything that binds a local service uses (the embedded
engine, the locust master, collective benchmarks, tests). It lives in the contract because that
is the one leaf every package may import."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS picks it; another process may take it later)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
