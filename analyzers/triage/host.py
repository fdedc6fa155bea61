"""P99 checks of the host, last in the seed's order: CPU by process (the server's own, the load
generator's, other processes' named), run-queue pressure, and GPUs throttling their clocks."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from analyzers.triage.contracts import CheckResult, Finding, failed, passed, unchecked
from analyzers.triage.evidence import SampleSplit, finite_mean, lift
from analyzers.triage.exposure import differential_in_time, held_windows
from analyzers.triage.processes import per_process, read_top_others, spiking
from analyzers.triage.tail_windows import TailWindows
from analyzers.triage.throughout import NO_CONTRAST, held_throughout, level_windows
from rundir.table import RequestTable

HOST_BUSY_PCT = 90.0  # all cores this busy in the spikes: the host is saturated
NEIGHBOUR_CORES = 0.5  # other processes using at least this many cores in the spikes ...
NEIGHBOUR_LIFT = 1.5  # ... and this many times their calm use ...
NEIGHBOUR_EXTRA = 0.5  # ... and at least this many cores more than in the calm
PROCESS_EXTRA = 0.5  # named processes taking this many cores more in the spikes than in the calm
COMPUTE_BOUND = 0.75  # the server itself on this share of the cores: saturation
# The server felt contention in an interval when its own threads waited for a CPU this share of
# their runnable time (schedstat; alone beside its load generator on 2 cores they wait ~10-15%).
# That gates a neighbour held throughout a level, and busy CPU nobody in /proc claims.
SERVER_FELT_WAIT = 0.3
FELT_NEIGHBOUR_CORES = 0.25  # other processes above their background by this much, while the server waited
PSI_FELT = 0.5  # ... or, for runs without schedstat, some task waited this share of the time
TOP_NAMED = 5
__all__ = ["check_cpu", "check_gpu_throttle", "read_top_others"]
# NVML clock event reasons that slow a busy GPU down (idle and application clocks are benign).
SLOWDOWN_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}

CPU_ID, CPU_TITLE = "p99.host.cpu", "the host's CPU is not saturated"
GPU_ID, GPU_TITLE = "p99.host.gpu-throttle", "GPUs are not throttling"


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
    others = _others(host, server, ncores)
    context = None
    srv_spike = evidence.get("server_cpu_cores_spikes")
    if srv_spike is not None and srv_spike >= COMPUTE_BOUND * ncores:
        context = (
            f"the server itself took {srv_spike:.1f} of {ncores} cores in the spikes: a compute-bound "
            "engine (saturation), not a neighbour"
        )
    neighbour = (
        _find_neighbour(host, others, tails, table, top_others or {}, evidence, busy_spike)
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


def _others(host: SampleSplit, server: np.ndarray | None, ncores: int) -> np.ndarray | None:
    """Other processes' CPU per interval, in cores. The probe names the processes it finds in /proc;
    one that exited before the sample (a burner stopped mid-interval, a short job) took its ticks
    with it, yet /proc/stat counted them: what was busy beyond the server and the load generator is
    the others' too, named or not — counted where the target felt it (its threads waited for a
    CPU), since unnamed CPU can also be the load generator's own processes ending with a level."""
    if server is None:
        return host.values("others_cpu_cores") if host.has("others_cpu_cores") else None
    client = np.nan_to_num(host.values("client_cpu_cores")) if host.has("client_cpu_cores") else 0.0
    implied = np.clip(np.nan_to_num(host.values("cpu_pct")) / 100.0 * ncores - server - client, 0.0, None)
    if not host.has("others_cpu_cores"):  # older runs: all busy CPU minus the server's
        return implied
    visible = host.values("others_cpu_cores")
    if host.has("server_cpu_wait_share"):
        felt = np.nan_to_num(host.values("server_cpu_wait_share")) >= SERVER_FELT_WAIT
    elif host.has("cpu_pressure_some_share"):
        felt = np.nan_to_num(host.values("cpu_pressure_some_share")) >= PSI_FELT
    else:
        return visible
    return np.where(felt, np.fmax(visible, implied), visible)


def _find_neighbour(
    host: SampleSplit,
    others: np.ndarray,
    tails: TailWindows,
    table: RequestTable | None,
    top_others: dict[float, list[dict]],
    evidence: dict,
    busy_spike: float | None,
) -> CheckResult | None:
    """First what each request lived through (analyzers/triage/exposure.py): a neighbour active for
    7 s of a level is found even where the spike windows cover only part of it; then the spike
    windows' comparison, for runs without request-level contrast; last a neighbour present for a
    whole level, which no contrast inside the level can show (analyzers/triage/throughout.py)."""
    if table is not None:
        found = _neighbour_by_exposure(host, others, tails, table, top_others, evidence)
        if found is not None:
            return found
    if tails.spikes:
        found = _neighbour_by_spikes(host, others, tails, top_others, evidence, busy_spike)
        if found is not None:
            return found
    return _neighbour_throughout(host, others, tails, table, top_others, evidence) if table is not None else None


def _neighbour_by_spikes(
    host: SampleSplit,
    others: np.ndarray,
    tails: TailWindows,
    top_others: dict[float, list[dict]],
    evidence: dict,
    busy_spike: float | None,
) -> CheckResult | None:
    """Other processes in the spike intervals against the calm: in the aggregate, and process by process."""
    o_spike, o_calm = finite_mean(others[host.spike]), finite_mean(others[~host.spike])
    evidence.update(other_cpu_cores_spikes=o_spike, other_cpu_cores_calm=o_calm)
    procs = per_process(top_others, host)
    burst = spiking(procs)
    extra = sum(p["cpu_cores_spikes"] - p["cpu_cores_calm"] for p in burst)
    aggregate = (
        o_spike is not None
        and o_spike >= NEIGHBOUR_CORES
        and lift(o_spike, o_calm) >= NEIGHBOUR_LIFT
        and o_spike - (o_calm or 0.0) >= NEIGHBOUR_EXTRA
    )
    # Per process: on a shared host a steady background hides the neighbour in the aggregate.
    if aggregate or extra >= PROCESS_EXTRA:
        named = burst or procs
        evidence["top_others_spikes"] = named[:TOP_NAMED]
        who = ", ".join(
            f"{p['comm']} (pid {p['pid']}, {p['cpu_cores_spikes']:.2f} cores vs {p['cpu_cores_calm']:.2f})"
            for p in named[:3]
        )
        if len(burst) > 3:
            who += f" and {len(burst) - 3} more"
        psi = evidence.get("cpu_pressure_some_share_spikes")
        pids = {p["pid"] for p in burst}
        mask = (
            np.nan_to_num(others) >= NEIGHBOUR_CORES
            if not burst
            else np.array(
                [any(int(q.get("pid", -1)) in pids for q in top_others.get(float(t), []) or []) for t in host.end]
            )
        )
        explains = host.windows_where(tails, mask)
        took = (
            f"{extra:.1f} cores more in the spike windows than in the calm"
            if burst
            else f"{o_spike:.1f} cores in the spike windows vs {o_calm or 0:.1f} in the calm"
        )
        finding = Finding(
            CPU_ID,
            "host",
            "high" if (busy_spike or 0) >= HOST_BUSY_PCT else "medium",
            f"other processes took {took} (a noisy neighbour"
            + (f": {who}" if who else "")
            + ")"
            + (f"; tasks waited for a CPU {psi:.0%} of the time" if psi else ""),
            evidence,
            explains,
            len(tails.spikes),
            "move the neighbour, or pin the server to cores of its own (taskset/cpuset)",
        )
        return failed(finding, CPU_TITLE, finding.title)
    return None


def _neighbour_by_exposure(
    host: SampleSplit,
    others: np.ndarray,
    tails: TailWindows,
    table: RequestTable,
    top_others: dict[float, list[dict]],
    evidence: dict,
) -> CheckResult | None:
    """Other processes as a condition in time: the probe intervals where they held clearly more than
    their steady background (a shared host's compilers and tests are the body's too)."""
    o = np.nan_to_num(others)
    if host.has("server_cpu_wait_share"):
        # Where the server's own waits were read, a smaller neighbour counts when the server felt it:
        # half a core taken from a server pinned to one core is the server's loss however small a
        # share of the host it is (the differential below still has to separate tail from body).
        # The background is the quietest quarter of the run: a neighbour there half the time would
        # lift a median to itself.
        felt = np.nan_to_num(host.values("server_cpu_wait_share")) >= SERVER_FELT_WAIT
        level = max(FELT_NEIGHBOUR_CORES, float(np.percentile(o, 25)) + FELT_NEIGHBOUR_CORES)
        held = (o >= level) & felt
    else:
        level = max(NEIGHBOUR_CORES, float(np.median(o)) + NEIGHBOUR_EXTRA)
        held = o >= level
    found = differential_in_time(table, tails.metric, held_windows(host.start, host.end, held))
    if found is None or not found.diff.separates:
        return None
    diff, seconds = found.diff, found.seconds
    named = spiking(per_process(top_others, replace(host, spike=held)))
    who = ", ".join(f"{p['comm']} (pid {p['pid']}, {p['cpu_cores_spikes']:.2f} cores)" for p in named[:3])
    if len(named) > 3:
        who += f" and {len(named) - 3} more"
    ev = dict(
        evidence,
        **diff.evidence(),
        neighbour_cores_threshold=round(level, 2),
        neighbour_cores_when_held=finite_mean(o[held]),
        neighbour_seconds=round(seconds, 1),
        top_others_when_held=named[:TOP_NAMED],
    )
    held_words = f"{seconds:.0f} s when other processes held {finite_mean(o[held]) or 0:.1f} cores"
    finding = Finding(
        CPU_ID,
        "host",
        "high" if diff.attributable >= 0.6 else "medium",
        f"a noisy neighbour: other processes took {finite_mean(o[held]) or 0:.1f} cores for "
        f"{seconds:.0f} s" + (f" ({who})" if who else "") + "; " + diff.words(tails.metric, "the " + held_words),
        ev,
        found.windows,
        len(tails.spikes),
        "move the neighbour, or pin the server to cores of its own (taskset/cpuset)",
        kind="differential",
        tail_share=diff.attributable,
    )
    return failed(finding, CPU_TITLE, finding.title)


def _neighbour_throughout(
    host: SampleSplit,
    others: np.ndarray,
    tails: TailWindows,
    table: RequestTable,
    top_others: dict[float, list[dict]],
    evidence: dict,
) -> CheckResult | None:
    """A neighbour present for the whole of a level (analyzers/triage/throughout.py): other
    processes held cores in nearly every interval of it, and the server's own threads waited for a
    CPU (schedstat; PSI where the server's threads were not read)."""
    o = np.nan_to_num(others)
    if host.has("server_cpu_wait_share"):
        waited, waited_field = np.nan_to_num(host.values("server_cpu_wait_share")), "server_cpu_wait_share"
        felt = waited >= SERVER_FELT_WAIT
    elif host.has("cpu_pressure_some_share"):
        waited, waited_field = np.nan_to_num(host.values("cpu_pressure_some_share")), "cpu_pressure_some_share"
        felt = waited >= PSI_FELT
    else:
        waited, waited_field = np.ones(o.shape), None
        felt = np.ones(o.shape, dtype=bool)
    held = held_throughout(host, (o >= NEIGHBOUR_CORES) & felt, level_windows(table, tails.metric))
    if not held:
        return None
    rows = np.unique(np.concatenate([h.rows for h in held]))
    cores, wait = finite_mean(o[rows]) or 0.0, finite_mean(waited[rows])
    named = per_process(top_others, replace(host, spike=np.isin(np.arange(o.size), rows)))[:TOP_NAMED]
    who = ", ".join(f"{p['comm']} (pid {p['pid']}, {p['cpu_cores_spikes']:.2f} cores)" for p in named[:3])
    levels = ", ".join(h.words() for h in held)
    # Over the levels it held: no spike-against-calm figures, which say nothing of a condition that
    # was everywhere.
    ev = dict(
        cores=evidence.get("cores"),
        throughout_levels=[h.level_id for h in held],
        neighbour_cores_throughout=round(cores, 2),
        top_others_throughout=named,
        waited_field=waited_field,
        waited_share_throughout=None if wait is None or waited_field is None else round(wait, 3),
        server_cpu_cores_throughout=_mean_over(host, "server_cpu_cores", rows),
        client_cpu_cores_throughout=_mean_over(host, "client_cpu_cores", rows),
    )
    whose_wait = (
        "the server's threads waited for a CPU"
        if waited_field == "server_cpu_wait_share"
        else "some task waited for a CPU"
    )
    title = (
        f"a noisy neighbour throughout {levels}: other processes held {cores:.1f} of "
        f"{len(host.fields('cpu_per_core_pct.')) or 1} cores"
        + (f" ({who})" if who else "")
        + (f", and {whose_wait} {wait:.0%} of the time" if waited_field and wait is not None else "")
        + f"; {NO_CONTRAST}"
    )
    finding = Finding(
        CPU_ID,
        "host",
        "high",
        title,
        ev,
        [h.window for h in held],
        len(tails.spikes),
        "rerun with the neighbour gone, or pin the server to cores of its own (taskset/cpuset), "
        "and compare the runs (llmbench compare)",
        kind="throughout",
    )
    return failed(finding, CPU_TITLE, finding.title)


def _mean_over(host: SampleSplit, name: str, rows: np.ndarray) -> float | None:
    mean = finite_mean(host.values(name)[rows]) if host.has(name) else None
    return None if mean is None else round(mean, 3)


def check_gpu_throttle(gpu: SampleSplit | None, tails: TailWindows) -> CheckResult:
    masks = gpu.fields("gpus.") if gpu is not None else []
    masks = [f for f in masks if f.endswith(".throttle_mask")]
    if gpu is None or not masks:  # (no masks without a gpu probe)
        return unchecked(GPU_ID, "host", GPU_TITLE, "no gpu probe rows in this run (no GPU, or --probes without gpu)")
    slowed = np.zeros(gpu.keep.sum(), dtype=bool)
    reasons: set[str] = set()
    for f in masks:
        m = np.nan_to_num(gpu.values(f)).astype(np.int64)
        for bit, name in SLOWDOWN_BITS.items():
            hit = (m & bit) != 0
            if (hit & gpu.spike).any():
                reasons.add(name)
            slowed |= hit
    s_spike, s_calm = finite_mean(slowed[gpu.spike].astype(float)), finite_mean(slowed[~gpu.spike].astype(float))
    evidence: dict[str, Any] = dict(
        throttled_share_spikes=s_spike, throttled_share_calm=s_calm, reasons=sorted(reasons)
    )
    if not s_spike or lift(s_spike, s_calm) < 2.0:
        return passed(
            GPU_ID,
            "host",
            GPU_TITLE,
            f"clocks slowed in {s_spike or 0:.0%} of spike intervals vs {s_calm or 0:.0%} of calm ones",
            **evidence,
        )
    finding = Finding(
        GPU_ID,
        "host",
        "medium",
        f"GPU clocks were slowed ({', '.join(sorted(reasons))}) in "
        f"{s_spike:.0%} of the spike intervals vs {s_calm or 0:.0%} of the calm",
        evidence,
        gpu.windows_where(tails, slowed),
        len(tails.spikes),
        "check cooling and power limits (nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE)",
    )
    return failed(finding, GPU_TITLE, finding.title)
