"""The elementwise cost: one layer's worth of refengine's norms, RoPE and activation, by tokens x hidden."""

from __future__ import annotations

from analyzers.plan.calibrate.grid import CalibrationGrid
from analyzers.plan.calibrate.timing import timed
from analyzers.plan.profile import LinearCost


def measure_elementwise(grid: CalibrationGrid, hidden: int = 1024) -> tuple[LinearCost, list]:
    import torch

    from refengine.model.layers.activation import SiluAndMul
    from refengine.model.layers.norm import RMSNorm
    from refengine.model.layers.rotary import RotaryEmbedding

    norm, act = RMSNorm(hidden), SiluAndMul()
    rope = RotaryEmbedding(grid.head_dim, 4096, 10000.0)
    inter = int(hidden * 2.75)
    xs, ys = [], []
    for t in grid.elementwise_tokens:
        h, r = torch.randn(t, hidden), torch.randn(t, hidden)
        q, k = torch.randn(t, grid.heads * grid.head_dim), torch.randn(t, grid.kv_heads * grid.head_dim)
        g, pos = torch.randn(t, 2 * inter), torch.arange(t) % 4096

        def layer(h=h, r=r, q=q, k=k, g=g, pos=pos) -> None:
            a, b = norm(h, r)
            rope(pos, q, k)
            norm(a, b)
            act(g)

        with torch.inference_mode():
            xs.append(float(t) * hidden)
            ys.append(timed(layer, grid.repeats))
    return LinearCost.fit(xs, ys), list(zip(xs, ys))
