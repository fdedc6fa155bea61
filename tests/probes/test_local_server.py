"""The process behind a local --target is found from the port it listens on (probes/local_server.py),
so the host probe can tell the server's CPU from a neighbour's without --server-pid."""

from __future__ import annotations

import subprocess
import sys

from probes.local_server import listening_pid
from rundir.ports import free_port

LISTEN = (
    "import socket,sys,time; s=socket.socket(); s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); "
    "print('up', flush=True); time.sleep(60)"
)


def _listener(host: str, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", LISTEN, host, str(port)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    return proc


def test_the_process_listening_on_a_loopback_targets_port_is_named():
    port = free_port()
    proc = _listener("127.0.0.1", port)
    try:
        assert listening_pid(f"http://127.0.0.1:{port}") == proc.pid
        assert listening_pid(f"http://localhost:{port}/v1") == proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_a_server_on_every_address_is_found_through_loopback():
    port = free_port()
    proc = _listener("0.0.0.0", port)
    try:
        assert listening_pid(f"http://127.0.0.1:{port}") == proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_no_listener_or_another_host_is_none():
    port = free_port()
    assert listening_pid(f"http://127.0.0.1:{port}") is None
    assert listening_pid("http://192.0.2.7:8000") is None  # TEST-NET-1: never this host
    assert listening_pid("http://no-such-host.invalid:8000") is None
