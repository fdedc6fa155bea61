"""The elementwise cost: one layer's worth of refengine's norms, RoPE and activation, by tokens x hidden."""

from __future__ import annotations

from analyzers.plan.calibrate.device import CPU, MeasureDevice
from analyzers.plan.calibrate.grid import CalibrationGrid
from analyzers.plan.calibrate.timing import timed
from analyzers.plan.profile import LinearCost


def measure_elementwise(
    grid: CalibrationGrid, device: MeasureDevice = CPU, hidden: int = 1024
) -> tuple[LinearCost, list]:
    import torch

    from refengine.model.layers.activation import SiluAndMul
    from refengine.model.layers.norm import RMSNorm
    from refengine.model.layers.rotary import RotaryEmbedding

    on = dict(dtype=device.dtype, device=device.kind)
    norm, act = RMSNorm(hidden).to(**on), SiluAndMul()
    rope = RotaryEmbedding(grid.head_dim, 4096, 10000.0).to(device.kind)
    inter = int(hidden * 2.75)
    xs, ys = [], []
    for t in grid.elementwise_tokens:
        h, r = torch.randn(t, hidden, **on), torch.randn(t, hidden, **on)
        q, k = torch.randn(t, grid.heads * grid.head_dim, **on), torch.randn(t, grid.kv_heads * grid.head_dim, **on)
        g, pos = torch.randn(t, 2 * inter, **on), torch.arange(t, device=device.kind) % 4096

        def layer(h=h, r=r, q=q, k=k, g=g, pos=pos) -> None:
            a, b = norm(h, r)
            rope(pos, q, k)
            norm(a, b)
            act(g)

        with torch.inference_mode():
            xs.append(float(t) * hidden)
            ys.append(timed(layer, grid.repeats, sync=device.sync()))
    return LinearCost.fit(xs, ys), list(zip(xs, ys))
