"""Where calibration measures: this host's CPU or a CUDA GPU, in the dtype refengine computes in there.

The operator tables are measured with refengine's own layers on the device the engine would run on,
in the dtype it would pick (refengine/device.py: float32 on a CPU, bfloat16 on a GPU), so one rule
decides both. Each measurement places its tensors explicitly (torch's default-device mode would add its
own cost to every call it times), and a GPU's calls are timed with a synchronize (timing.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from analyzers.diagnosis_error import DiagnosisError


@dataclass(frozen=True)
class MeasureDevice:
    kind: str  # "cpu" or "cuda"
    dtype_name: str  # refengine's dtype name there: "float32" or "bfloat16"
    description: str  # what the profile's assumptions say was measured

    def __post_init__(self) -> None:
        if self.kind not in ("cpu", "cuda"):
            raise DiagnosisError(f"calibration measures on cpu or cuda, not {self.kind!r}")

    @property
    def is_gpu(self) -> bool:
        return self.kind == "cuda"

    @property
    def dtype_bytes(self) -> int:
        return int(self.dtype.itemsize)

    @property
    def dtype(self) -> Any:  # torch.dtype (torch is imported only where a measurement runs)
        from refengine.device import DTYPES

        return DTYPES[self.dtype_name]

    def sync(self) -> Callable[[], None] | None:
        """What waits for the device's queued work (None on a CPU, whose calls return when done)."""
        import torch

        return torch.cuda.synchronize if self.is_gpu else None


CPU = MeasureDevice("cpu", "float32", "this host's CPU, float32")


def resolve_measure_device(name: str) -> MeasureDevice:
    """auto (cuda when one is visible), cpu or cuda, as refengine resolves `--device`."""
    import platform

    import torch

    from refengine.device import resolve_device, resolve_dtype
    from refengine.errors import RefEngineError

    if name not in ("auto", "cpu", "cuda"):
        raise DiagnosisError(f"--device must be auto, cpu or cuda, got {name!r}")
    try:
        device = resolve_device(name)
    except RefEngineError as exc:
        raise DiagnosisError(f"{exc} (or calibrate with --device cpu)") from None
    dtype = resolve_dtype("auto", device)
    dtype_name = str(dtype).removeprefix("torch.")
    if device.type == "cuda":
        what = f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda}), {dtype_name}"
    else:
        what = f"{platform.node()}'s CPU ({platform.machine()}), {dtype_name}"
    return MeasureDevice(device.type, dtype_name, what)
