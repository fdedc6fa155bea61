"""A replica starved of its own cores: sent alike, its own server's threads waited for a CPU where the
other replicas' did not (docs/diagnosis.md, p99.fleet.hot-replica).

A neighbour pinned to one replica's cores slows that replica's steps now and then, not always: its
median request may be barely slower (1.10x on a fleet family draw whose tail was 99% that replica's),
so the latency comparisons alone do not name it, and the host check names the neighbour without
saying whose cores it took. The host probe reads each local replica's own run-queue wait
(`per_replica`, probes/run_queue_wait.py): a replica whose threads waited for a CPU in STARVED or
more of their runnable time, at least OTHERS_FACTOR times as much as every other replica's, lived
through the neighbour where the others did not. The tail concentrating on it is then enough, as for
a replica's own queue (own_queue.py); the host's neighbour finding is its mechanism and yields to it.
"""

from __future__ import annotations

import numpy as np

from analyzers.probe_series import ProbeSeries
from analyzers.triage.host.neighbour import CPU_ID
from analyzers.triage.tail_windows import Window

# Two busy loops beside a replica on its one core leave it a third of the core: it waits two thirds
# of its runnable time. On a real two-replica fleet so planted (fleet family seed 10, draw 7, run again)
# the starved replica waited 65%, the other, sharing its core with the load generator, 30%.
STARVED = 0.4
OTHERS_FACTOR = 2.0
OWN_CORES_KEY = "waited_for_its_own_cores"  # the hot-replica finding's evidence: True where it did


def replica_cpu_wait(host: ProbeSeries | None, replicas: list[str], span: Window) -> dict[str, float]:
    """Each replica's mean share of its runnable time spent waiting for a CPU over the host probe's rows
    inside `span`; replicas the probe never read are left out (a fleet front's, or a remote one)."""
    if host is None or not len(host):
        return {}
    inside = (host.t >= span.start) & (host.t <= span.end + 1.0)
    out = {}
    for name in replicas:
        share = host.numeric.get(f"per_replica.{name}.cpu_wait_share")
        if share is None:
            continue
        rows = inside & np.isfinite(share)
        if rows.any():
            out[name] = float(np.mean(share[rows]))
    return out


def starved_alone(waits: dict[str, float], replica: str) -> bool:
    """Did `replica` wait for a CPU in STARVED or more of its runnable time, and OTHERS_FACTOR times as
    much as every other replica (at least one, each read)?"""
    rest = [v for k, v in waits.items() if k != replica]
    mine = waits.get(replica)
    return mine is not None and bool(rest) and mine >= STARVED and mine >= OTHERS_FACTOR * max(rest)


def cpu_wait_words(waits: dict[str, float], replica: str) -> str:
    """'replica 0's server threads waited for a CPU in 67% of their runnable time, replica 1's in 8%:
    something else runs on its cores (p99.host.cpu names the busiest processes)'."""
    rest = ", ".join(f"replica {k}'s in {v:.0%}" for k, v in waits.items() if k != replica)
    return (
        f"replica {replica}'s server threads waited for a CPU in {waits[replica]:.0%} of their runnable time, "
        f"{rest}: something else runs on its cores ({CPU_ID} names the busiest processes)"
    )
