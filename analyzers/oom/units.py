"""`llmdiag oom`'s units and the seed's whole-model KV figures.

`--gpu-memory` takes a number (GiB, as before), or a size with its unit: 80GiB, 80G (GiB), 80GB
(decimal, 10^9 bytes, as vendors print it: 80 GB = 74.5 GiB), 24576MiB, 80000MB, 1TiB.

The seed prices the KV cache for the whole model (docs/yardsticks.md: 80 layers x 8 KV heads x 128
x FP16 = 320 KiB per token, 640 MiB per request of 2,048 tokens, 20 GiB for 32 requests); what
one GPU holds is that divided by TP (over KV heads, replicated below one head per GPU) and PP
(over layers). Both are printed so the seed's numbers can be checked and the GPU's budget read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from analyzers.diagnosis_error import DiagnosisError

GiB = 1024**3
_UNITS = {
    "": GiB,
    "g": GiB,
    "gib": GiB,
    "gb": 1e9,
    "m": 1024**2,
    "mib": 1024**2,
    "mb": 1e6,
    "t": 1024**4,
    "tib": 1024**4,
    "tb": 1e12,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_gpu_memory(text: str | float) -> float:
    """GiB from '80', '80GiB', '80GB', '24576MiB' ...; DiagnosisError with the accepted forms otherwise."""
    if isinstance(text, (int, float)):
        value, unit = float(text), ""
    else:
        m = _SIZE.match(str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise DiagnosisError(
                f"--gpu-memory {text!r}: give GiB (80) or a size with a unit: 80GiB, 80GB "
                "(10^9 bytes), 24576MiB, 80000MB"
            )
        value, unit = float(m.group(1)), m.group(2).lower()
    gib = value * _UNITS[unit] / GiB
    if not gib > 0:
        raise DiagnosisError(f"--gpu-memory must be positive, got {text!r}")
    return gib


@dataclass
class KvFigure:
    what: str
    whole_model_bytes: float
    per_gpu_bytes: float


def kv_figures(shape, plan, est) -> list[KvFigure]:
    """Per token, per request of max_model_len, and for the plan's concurrency: whole model and one GPU."""
    whole = shape.kv_bytes_per_token(plan.kv_bytes)
    gpu = est.kv_bytes_per_token_gpu
    n, c = plan.max_model_len, plan.concurrency
    return [
        KvFigure("per token", whole, gpu),
        KvFigure(f"per request of {n:,} tokens (max_model_len)", whole * n, gpu * n),
        KvFigure(f"{c} concurrent requests of {n:,} tokens", whole * n * c, gpu * n * c),
    ]


def human_bytes(b: float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", 1024**2), ("KiB", 1024)):
        if b >= size:
            v = b / size
            return f"{v:,.0f} {unit}" if v == int(v) else f"{v:,.2f} {unit}"
    return f"{b:,.0f} B"
