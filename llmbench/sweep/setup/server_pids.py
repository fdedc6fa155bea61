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


def local_replica_pids(urls: list[str], probe_names: list[str], console) -> dict[str, int]:
    """The processes listening on the other replicas' ports of a fleet driven directly (`urls`: all of
    them; the first URL's is the server pid), by replica name (its index in `urls`, as the records
    name it): the host probe counts their CPU as the server's, not a neighbour's, and reads each
    replica's own CPU wait."""
    if len(urls) < 2 or "host" not in probe_names:
        return {}
    from probes.local_server import listening_pid

    pids = {str(i): pid for i, pid in ((i, listening_pid(u)) for i, u in enumerate(urls) if i) if pid is not None}
    if pids:
        console.print(
            f"the other replicas' server processes: pids {', '.join(map(str, pids.values()))} (listening on "
            "their ports): their CPU is the server's",
            highlight=False,
        )
    return pids
