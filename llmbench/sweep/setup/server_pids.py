"""The processes serving a local target, for the host and stacks probes: the pid listening on the
target's port, and on a fleet's other replicas' ports (their CPU is the server's, not a neighbour's)."""

from __future__ import annotations


def local_server_pid(url: str, probe_names: list[str], console) -> int | None:
    """The pid listening on a local target's port, for the host and stacks probes (probes/local_server.py)."""
    if not {"host", "stacks"} & set(probe_names):
        return None
    from probes.local_server import listening_pid

    pid = listening_pid(url)
    if pid is not None:
        console.print(
            f"the target's server process: pid {pid} (listening on its port); give --server-pid to name another",
            highlight=False,
        )
    return pid


def local_replica_pids(urls: list[str], probe_names: list[str], console) -> list[int]:
    """The processes listening on the other replicas' ports of a fleet driven directly (the first
    URL's is the server pid): the host probe counts their CPU as the server's, not a neighbour's."""
    if not urls or "host" not in probe_names:
        return []
    from probes.local_server import listening_pid

    pids = [pid for pid in (listening_pid(u) for u in urls) if pid is not None]
    if pids:
        console.print(
            f"the other replicas' server processes: pids {', '.join(map(str, pids))} (listening on their "
            "ports): their CPU is the server's",
            highlight=False,
        )
    return pids
