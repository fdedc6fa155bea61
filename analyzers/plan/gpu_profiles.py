"""Published profiles of the GPUs people plan for: datasheet peaks with efficiency factors stated as
assumptions (no measurement behind them; calibrate on the machine, or fit to a run, to replace them).

Peaks are dense (no sparsity) 16-bit tensor FLOP/s and HBM bandwidth from the vendors' datasheets;
bus bandwidth is what nccl-tests' all-reduce typically reaches inside one node, not the link's peak.
"""

from __future__ import annotations

from analyzers.diagnosis_error import DiagnosisError
from analyzers.plan.profile import CollectiveCost, LinearCost, MachineProfile, Roofline

# name -> (bf16 dense FLOP/s, HBM bytes/s, in-node all-reduce bus bandwidth bytes/s, datasheet)
_PEAKS = {
    "h100": (989e12, 3.35e12, 360e9, "H100 SXM5: 989 TFLOP/s BF16 dense, 3.35 TB/s HBM3, NVLink 4 900 GB/s"),
    "h200": (989e12, 4.8e12, 360e9, "H200 SXM: 989 TFLOP/s BF16 dense, 4.8 TB/s HBM3e, NVLink 4 900 GB/s"),
    "a100": (312e12, 2.039e12, 230e9, "A100 SXM 80GB: 312 TFLOP/s BF16 dense, 2.04 TB/s HBM2e, NVLink 3 600 GB/s"),
    "mi300x": (1307e12, 5.3e12, 300e9, "MI300X: 1307 TFLOP/s BF16 dense, 5.3 TB/s HBM3, Infinity Fabric 896 GB/s"),
}
COMPUTE_EFFICIENCY = 0.6  # large GEMMs reach 60-75% of the dense peak; small ones far less (roofline covers)
MEMORY_EFFICIENCY = 0.8  # decode reads of weights and KV reach ~80% of HBM bandwidth
LAUNCH_S = 8e-6  # per kernel, without CUDA graphs
STEP_OVERHEAD = LinearCost(fixed_s=2e-3, per_unit_s=20e-6)  # scheduler, inputs, sampler: a vLLM-like engine
COLLECTIVE_LATENCY_S = 15e-6  # a small NCCL all-reduce inside one node


def published_profile(name: str) -> MachineProfile:
    key = name.lower()
    if key not in _PEAKS:
        raise DiagnosisError(
            f"no published profile {name!r}; choose from {', '.join(sorted(_PEAKS))} or give a "
            "profile file (llmdiag calibrate --out FILE)"
        )
    flops, bw, bus, sheet = _PEAKS[key]
    return MachineProfile(
        name=key,
        source="published",
        dtype_bytes=2,
        roofline=Roofline(
            peak_flops=flops,
            mem_bw_bytes_s=bw,
            compute_efficiency=COMPUTE_EFFICIENCY,
            memory_efficiency=MEMORY_EFFICIENCY,
            launch_s=LAUNCH_S,
        ),
        step_overhead=STEP_OVERHEAD,
        collective=CollectiveCost(COLLECTIVE_LATENCY_S, bus),
        assumptions=[
            sheet,
            f"compute efficiency {COMPUTE_EFFICIENCY:.0%} of the dense peak",
            f"memory efficiency {MEMORY_EFFICIENCY:.0%} of HBM bandwidth",
            f"{LAUNCH_S * 1e6:.0f} us per kernel launch (no CUDA graphs)",
            f"step overhead {STEP_OVERHEAD.fixed_s * 1e3:.1f} ms + {STEP_OVERHEAD.per_unit_s * 1e6:.0f} us "
            "per request (scheduler, inputs, sampler)",
            f"in-node all-reduce bus bandwidth {bus / 1e9:.0f} GB/s, latency "
            f"{COLLECTIVE_LATENCY_S * 1e6:.0f} us (nccl-tests-like)",
        ],
    )


def published_names() -> list[str]:
    return sorted(_PEAKS)


def resolve_profile(name_or_path: str) -> MachineProfile:
    """A published GPU's name (h100, h200, a100, mi300x) or a profile file (llmdiag calibrate --out FILE)."""
    if name_or_path.lower() in _PEAKS:
        return published_profile(name_or_path)
    return MachineProfile.load(name_or_path)
