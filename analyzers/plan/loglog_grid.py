"""Interpolation inside a measured grid, in log space: the tables of a machine profile (matmuls by
rows and size, prefill attention by tokens and head dim) are timed at a few shapes each, and a cost
between them is read log-log bilinearly (a power law between neighbours), never extrapolated here:
callers clamp to the grid and scale from its edge themselves, with a note."""

from __future__ import annotations

import math


def loglog_bilinear(xs: list[int], ys: list[int], zs: list[list[float]], x: float, y: float) -> float:
    """log(z) interpolated in (log x, log y); x and y inside [xs[0], xs[-1]] and [ys[0], ys[-1]]."""

    def bracket(axis: list[int], v: float) -> tuple[int, float]:
        i = max(0, min(len(axis) - 2, next((j for j in range(len(axis) - 1) if v <= axis[j + 1]), len(axis) - 2)))
        lo, hi = math.log(axis[i]), math.log(axis[i + 1])
        return i, (math.log(v) - lo) / (hi - lo) if hi > lo else 0.0

    i, fx = bracket(xs, x)
    j, fy = bracket(ys, y)
    z = [[math.log(zs[a][b]) for b in (j, j + 1)] for a in (i, i + 1)]
    return z[0][0] * (1 - fx) * (1 - fy) + z[1][0] * fx * (1 - fy) + z[0][1] * (1 - fx) * fy + z[1][1] * fx * fy
