"""CalibrationGrid: the shapes `llmdiag calibrate` measures at."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.diagnosis_error import DiagnosisError


@dataclass(frozen=True)
class CalibrationGrid:
    # 2, 4 and 8 rows: where a decode batch's linears change kernel (refengine/model/layers/cpu_gemm.py
    # sends a few float32 rows to F.linear, more to the packed path), which interpolation cannot see.
    ms: tuple[int, ...] = (1, 2, 4, 8, 16, 64, 256, 1024, 2048)
    sizes: tuple[int, ...] = (64, 256, 1024, 4096)
    decode_batches: tuple[int, ...] = (1, 8, 32)
    decode_contexts: tuple[int, ...] = (64, 512, 2048)
    prefill_tokens: tuple[int, ...] = (32, 256, 1024)
    table_tokens: tuple[int, ...] = (32, 128, 512, 2048)  # the prefill attention table's sequences
    table_head_dims: tuple[int, ...] = (16, 64, 128)  # ... and head dims (4 heads, 2 KV heads)
    elementwise_tokens: tuple[int, ...] = (1, 32, 256, 1024)
    overhead_batches: tuple[int, ...] = (1, 8, 32)
    repeats: int = 5
    heads: int = 16
    kv_heads: int = 4
    head_dim: int = 64
    # Decode attention at (heads, KV heads, head dim) layouts that differ in GQA ratio and head dim, so
    # its prices per KV element, query element and score carry to other layouts
    # (analyzers/plan/decode_attention.py): three independent mixes of the three.
    decode_layouts: tuple[tuple[int, int, int], ...] = ((16, 4, 64), (8, 8, 64), (16, 8, 16))

    def __post_init__(self) -> None:
        for name in (
            "ms",
            "sizes",
            "decode_batches",
            "decode_contexts",
            "prefill_tokens",
            "elementwise_tokens",
            "overhead_batches",
            "table_tokens",
            "table_head_dims",
        ):
            values = getattr(self, name)
            if len(values) < 2 or list(values) != sorted(set(values)) or values[0] < 1:
                raise DiagnosisError(f"calibration grid {name} needs at least two increasing values >= 1")
        if self.repeats < 1:
            raise DiagnosisError("repeats must be >= 1")
        mixes = [(2 * kv * d, h * d, h) for h, kv, d in self.decode_layouts if min(h, kv, d) >= 1 and h % kv == 0]
        if len(mixes) != len(self.decode_layouts) or np.linalg.matrix_rank(np.array(mixes, dtype=float)) < 3:
            raise DiagnosisError(
                "calibration grid decode_layouts needs (heads, KV heads, head dim) layouts, heads a multiple of "
                "KV heads, whose KV elements, query elements and scores per token are three independent mixes"
            )
