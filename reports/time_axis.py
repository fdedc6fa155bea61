"""The run's clock as every time-axis figure draws it, and a figure that knows its own geometry.

Every figure on the run's time axis (the per-request timeline, each probe's panels) has the same
width and horizontal margins (AXES_LEFT, AXES_RIGHT), the same x range, the level windows marked
and the P99 diagnosis' spike windows shaded, so a second is the same pixel column in all of
them. A TimeFigure carries, beside its SVG, what the report's small inline script needs to show
the values under the cursor: the x range, the margins, and each panel's vertical extent and lines
(downsampled to MAX_HOVER_POINTS).
"""

from __future__ import annotations

from dataclasses import dataclass, field

AXES_LEFT, AXES_RIGHT = 0.08, 0.98
MAX_HOVER_POINTS = 600


@dataclass
class TimeAxis:
    t0: float  # the run's start, epoch seconds
    xlim: tuple[float, float]  # seconds since t0, shared by every time-axis figure
    levels: list[tuple[str, float, float]] = field(default_factory=list)  # (level, window start, end) since t0
    spikes: list[tuple[float, float]] = field(default_factory=list)  # spike windows since t0


@dataclass
class TimeFigure:
    svg: str
    hover: dict | None = None  # {"x0", "x1", "l", "r", "t": [...], "panels": [...]}
