"""The host's GPU check: clocks slowed (power, thermal) in the spike windows more than in the calm,
from the NVML throttle reasons the gpu probe records."""

from __future__ import annotations

from typing import Any

import numpy as np

from analyzers.triage.contracts import CheckResult, Finding, failed, passed, unchecked
from analyzers.triage.evidence import SampleSplit, finite_mean, lift
from analyzers.triage.tail_windows import TailWindows

# NVML clock event reasons that slow a busy GPU down (idle and application clocks are benign).
SLOWDOWN_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}

GPU_ID, GPU_TITLE = "p99.host.gpu-throttle", "GPUs are not throttling"


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
