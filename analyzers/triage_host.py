"""P99 checks of the host, last in the seed's order: the server process's CPU, noisy neighbours on
the same cores, and GPUs throttling their clocks."""

from __future__ import annotations

import numpy as np

from analyzers.tail_windows import TailWindows
from analyzers.triage_evidence import SampleSplit, finite_mean, lift
from analyzers.triage_types import CheckResult, Finding, failed, passed, unchecked

HOST_BUSY_PCT = 90.0         # all cores this busy in the spikes: the host is saturated
NEIGHBOUR_CORES = 0.5        # other processes using at least this many cores in the spikes ...
NEIGHBOUR_LIFT = 2.0         # ... and this many times their calm use
# NVML clock event reasons that slow a busy GPU down (idle and application clocks are benign).
SLOWDOWN_BITS = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown",
                 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown"}

CPU_ID, CPU_TITLE = "p99.host.cpu", "the host's CPU is not saturated"
GPU_ID, GPU_TITLE = "p99.host.gpu-throttle", "GPUs are not throttling"


def check_cpu(host: SampleSplit | None, tails: TailWindows) -> CheckResult:
    if host is None or not host.has("cpu_pct"):
        return unchecked(CPU_ID, "host", CPU_TITLE, "no host probe in this run (llmbench sweep --probes host)")
    ncores = len(host.fields("cpu_per_core_pct.")) or 1
    busy_spike, busy_calm = host.mean("cpu_pct")
    evidence: dict = dict(cores=ncores, cpu_pct_spikes=busy_spike, cpu_pct_calm=busy_calm)
    others = None
    if host.has("server_cpu_cores"):
        server = np.nan_to_num(host.values("server_cpu_cores"))
        others = np.clip(host.values("cpu_pct") / 100.0 * ncores - server, 0.0, None)
        o_spike, o_calm = finite_mean(others[host.spike]), finite_mean(others[~host.spike])
        evidence.update(server_cpu_cores_spikes=finite_mean(server[host.spike]), server_cpu_cores_calm=finite_mean(server[~host.spike]),
                        other_cpu_cores_spikes=o_spike, other_cpu_cores_calm=o_calm)
        if o_spike is not None and o_spike >= NEIGHBOUR_CORES and lift(o_spike, o_calm) >= NEIGHBOUR_LIFT:
            explains = host.windows_where(tails, others >= NEIGHBOUR_CORES)
            finding = Finding(CPU_ID, "host", "high" if (busy_spike or 0) >= HOST_BUSY_PCT else "medium",
                              f"other processes took {o_spike:.1f} cores in the spike windows vs {o_calm or 0:.1f} in "
                              "the calm (a noisy neighbour)", evidence, explains, len(tails.spikes),
                              "find the neighbour (top/pidstat during a spike) and move it, or pin the server to "
                              "cores of its own (taskset/cpuset)")
            return failed(finding, CPU_TITLE, finding.title)
    if busy_spike is not None and busy_spike >= HOST_BUSY_PCT and (busy_calm is None or busy_calm < HOST_BUSY_PCT):
        explains = host.windows_where(tails, host.values("cpu_pct") >= HOST_BUSY_PCT)
        finding = Finding(CPU_ID, "host", "medium",
                          f"the host's CPUs were {busy_spike:.0f}% busy in the spike windows vs {busy_calm or 0:.0f}% "
                          "in the calm", evidence, explains, len(tails.spikes),
                          "see which process takes the CPU in the windows (probe stacks, py-spy); tokenization or "
                          "detokenization on the event loop is a common one")
        return failed(finding, CPU_TITLE, finding.title)
    return passed(CPU_ID, "host", CPU_TITLE, f"CPU {busy_spike or 0:.0f}% busy in the spikes vs {busy_calm or 0:.0f}% "
                  "in the calm", **evidence)


def check_gpu_throttle(gpu: SampleSplit | None, tails: TailWindows) -> CheckResult:
    masks = gpu.fields("gpus.") if gpu is not None else []
    masks = [f for f in masks if f.endswith(".throttle_mask")]
    if not masks:
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
    evidence = dict(throttled_share_spikes=s_spike, throttled_share_calm=s_calm, reasons=sorted(reasons))
    if not s_spike or lift(s_spike, s_calm) < 2.0:
        return passed(GPU_ID, "host", GPU_TITLE, f"clocks slowed in {s_spike or 0:.0%} of spike intervals vs "
                      f"{s_calm or 0:.0%} of calm ones", **evidence)
    finding = Finding(GPU_ID, "host", "medium", f"GPU clocks were slowed ({', '.join(sorted(reasons))}) in "
                      f"{s_spike:.0%} of the spike intervals vs {s_calm or 0:.0%} of the calm",
                      evidence, gpu.windows_where(tails, slowed), len(tails.spikes),
                      "check cooling and power limits (nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE)")
    return failed(finding, GPU_TITLE, finding.title)

