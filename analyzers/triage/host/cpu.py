"""The host's CPU check: a noisy neighbour named from other processes' own CPU (neighbour.py), the
server's own CPU as saturation (context here, a cause in the standing-tail analysis), and without
per-process data, the host busy only in the spikes."""

from __future__ import annotations

import numpy as np

from analyzers.triage.contracts import CheckResult, Finding, failed, passed, unchecked
from analyzers.triage.evidence import SampleSplit
from analyzers.triage.host.neighbour import CPU_ID, CPU_TITLE, HOST_BUSY_PCT, find_neighbour
from analyzers.triage.host.other_processes import others_cpu_cores
from analyzers.triage.tail_windows import TailWindows
from rundir.table import RequestTable

COMPUTE_BOUND = 0.75  # the server itself on this share of the cores: saturation


def check_cpu(
    host: SampleSplit | None,
    tails: TailWindows,
    top_others: dict[float, list[dict]] | None = None,
    table: RequestTable | None = None,
) -> CheckResult:
    """CPU by process: a neighbour is named only from other processes' own CPU; the server's own
    CPU (a compute-bound CPU engine) is saturation, context here and a cause in the standing-tail
    analysis; run-queue pressure (PSI) and steal say whether anyone waited for a core."""
    if host is None or not host.has("cpu_pct"):
        return unchecked(CPU_ID, "host", CPU_TITLE, "no host probe in this run (llmbench sweep --probes host)")
    ncores = len(host.fields("cpu_per_core_pct.")) or 1
    busy_spike, busy_calm = host.mean("cpu_pct")
    evidence: dict = dict(cores=ncores, cpu_pct_spikes=busy_spike, cpu_pct_calm=busy_calm)
    for name in (
        "server_cpu_cores",
        "client_cpu_cores",
        "others_cpu_cores",
        "cpu_pressure_some_share",
        "cpu_pressure_some_avg10",
        "cpu_steal_pct",
    ):
        if host.has(name):
            evidence[f"{name}_spikes"], evidence[f"{name}_calm"] = host.mean(name)
    server = np.nan_to_num(host.values("server_cpu_cores")) if host.has("server_cpu_cores") else None
    others = others_cpu_cores(host, server, ncores)
    context = None
    srv_spike = evidence.get("server_cpu_cores_spikes")
    if srv_spike is not None and srv_spike >= COMPUTE_BOUND * ncores:
        context = (
            f"the server itself took {srv_spike:.1f} of {ncores} cores in the spikes: a compute-bound "
            "engine (saturation), not a neighbour"
        )
    neighbour = (
        find_neighbour(host, others, tails, table, top_others or {}, evidence, busy_spike)
        if others is not None
        else None
    )
    if neighbour is not None:
        return neighbour
    if (
        others is None
        and busy_spike is not None
        and busy_spike >= HOST_BUSY_PCT
        and (busy_calm is None or busy_calm < HOST_BUSY_PCT)
        and tails.spikes
    ):
        # No per-process data: the host was busy only in the spikes, whoever it was.
        explains = host.windows_where(tails, host.values("cpu_pct") >= HOST_BUSY_PCT)
        finding = Finding(
            CPU_ID,
            "host",
            "medium",
            f"the host's CPUs were {busy_spike:.0f}% busy in the spike windows vs {busy_calm or 0:.0f}% "
            "in the calm (no per-process data: whose is unknown)",
            evidence,
            explains,
            len(tails.spikes),
            "see which process takes the CPU in the windows (probe host with the server's pid, py-spy)",
        )
        return failed(finding, CPU_TITLE, finding.title)
    return passed(
        CPU_ID,
        "host",
        CPU_TITLE,
        f"CPU {busy_spike or 0:.0f}% busy in the spikes vs {busy_calm or 0:.0f}% "
        "in the calm" + (f"; {context}" if context else ""),
        context=context,
        **evidence,
    )
