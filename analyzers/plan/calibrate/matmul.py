"""The matmul table: refengine's ColumnParallelLinear at a grid of rows x size, and the roofline it implies."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from analyzers.plan.calibrate.device import CPU, MeasureDevice
from analyzers.plan.calibrate.grid import CalibrationGrid
from analyzers.plan.calibrate.timing import WEIGHTS_WORKING_SET, timed
from analyzers.plan.profile import MatmulTable, Roofline

MAX_WEIGHTS = 64


def measure_matmul(grid: CalibrationGrid, device: MeasureDevice = CPU) -> MatmulTable:
    """Each size rotates through distinct weights (up to 256 MiB of them), as a model's step touches
    each linear's weight once: one weight timed over and over would sit in cache and measure a
    decode step's weight reads at cache speed, not memory's (a GPU's 50-60 MB L2 included)."""

    import torch

    from refengine.model.layers.linear import ColumnParallelLinear

    times = [[0.0] * len(grid.sizes) for _ in grid.ms]
    with torch.inference_mode():
        for j, s in enumerate(grid.sizes):
            layers = [
                ColumnParallelLinear(s, s, params_dtype=device.dtype).to(device.kind)
                for _ in range(max(1, min(MAX_WEIGHTS, WEIGHTS_WORKING_SET // (s * s * device.dtype_bytes))))
            ]
            for layer in layers:  # real values: uninitialized memory may hold slow denormals
                weight = layer.weight  # registered by the layer's quant method: nn.Module's getattr
                assert isinstance(weight, torch.Tensor)
                weight.normal_(0, 0.02)
            for i, m in enumerate(grid.ms):
                x = torch.randn(m, s, dtype=device.dtype, device=device.kind)
                for layer in layers:  # the first call packs the weight (refengine's CPU linear)
                    layer(x)
                rotation = itertools.cycle(layers)

                def call(x: torch.Tensor = x, rotation: Iterator[ColumnParallelLinear] = rotation) -> object:
                    return next(rotation)(x)

                times[i][j] = max(timed(call, grid.repeats, sync=device.sync()), 1e-7)
            del layers
    return MatmulTable(list(grid.ms), list(grid.sizes), monotone(times))


def monotone(times: list[list[float]]) -> list[list[float]]:
    """A larger matmul never costs less: a smaller shape that measured slower than a larger one was
    disturbed, so it is lowered to the larger one's time (scanning from the largest shape down)."""
    out = [row[:] for row in times]
    for i in reversed(range(len(out))):
        for j in reversed(range(len(out[0]))):
            up = out[i + 1][j] if i + 1 < len(out) else float("inf")
            right = out[i][j + 1] if j + 1 < len(out[0]) else float("inf")
            out[i][j] = min(out[i][j], up, right)
    return out


def roofline_of(table: MatmulTable, dtype_bytes: int = 4) -> Roofline:
    """The measured table's best FLOP rate and its small-M time as the roofline's peak and launch cost."""
    best = max(2.0 * m * s * s / table.times[i][j] for i, m in enumerate(table.ms) for j, s in enumerate(table.sizes))
    j = len(table.sizes) - 1
    s = table.sizes[j]
    bw = s * s * dtype_bytes / table.times[0][j]  # one row through the biggest weight: memory bound
    return Roofline(
        peak_flops=best,
        mem_bw_bytes_s=bw,
        compute_efficiency=1.0,
        memory_efficiency=1.0,
        launch_s=min(min(row) for row in table.times),
    )
