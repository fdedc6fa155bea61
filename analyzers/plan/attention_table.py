"""Prefill attention as measured: seconds per head on a grid of tokens x head dim (docs/planning.md).

A line in tokens x context x heads x head dim, through three calibration points at one head layout,
missed refengine's own Attention by -23% to +34% at that layout and by up to 3x at others (tiny-test's
head dim 16, Llama-3-8B's 128): per head, the cost is neither linear in the scores' work nor in the
head dim. So calibrate times one sequence of n tokens (its context n) at a few head dims, and a step's
chunk of n new tokens over a context c is read at s = sqrt(n x c) (the same score work), log-log
bilinear inside the grid, per head, times the heads. Outside the grid: scaled from its edge by the
work (tokens) or the head dim, with a note.

Per head is only as true as the call's thread count: refengine's CPU kernel splits a call over
threads by its whole work (rows x context x heads x head dim, refengine/kernels/cpu_paged_prefill.py),
so the same sequence is split for 16 heads and whole for 4. A CPU calibration therefore times every
point both ways (`times` whole, `split_times` over `split_threads`) and records the engine's rule
(`min_work_per_thread`); a step's call is read from the grid its own work picks. A table without
them (a GPU's, or one written before) is read as measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analyzers.diagnosis_error import DiagnosisError
from analyzers.plan.loglog_grid import loglog_bilinear


@dataclass(frozen=True)
class AttentionTable:
    tokens: list[int]
    head_dims: list[int]
    times: list[list[float]]  # seconds per head: times[i][j] at tokens[i], head_dims[j]
    split_times: list[list[float]] | None = None  # the same points with the call split over split_threads
    split_threads: int = 1
    min_work_per_thread: float | None = None  # the engine's rule: a call splits once each thread has this

    def __post_init__(self) -> None:
        if len(self.tokens) < 2 or len(self.head_dims) < 2 or len(self.times) != len(self.tokens):
            raise DiagnosisError("an attention table needs at least 2 x 2 points and a row per token count")
        if any(len(row) != len(self.head_dims) for row in self.times) or min(min(r) for r in self.times) <= 0:
            raise DiagnosisError("an attention table needs a positive time for every point")
        if sorted(set(self.tokens)) != self.tokens or sorted(set(self.head_dims)) != self.head_dims:
            raise DiagnosisError("an attention table's axes must be increasing")
        if self.split_times is not None and (
            [len(r) for r in self.split_times] != [len(r) for r in self.times]
            or min(min(r) for r in self.split_times) <= 0
            or self.split_threads < 2
            or not (self.min_work_per_thread or 0) > 0
        ):
            raise DiagnosisError("a split attention grid needs the same points, 2+ threads and the split rule")

    def grid_for(self, work: float) -> list[list[float]]:
        """The times a call of `work` (rows x context x heads x head dim, all its chunks) runs at:
        split where the engine's rule gives it a second thread, else whole."""
        if self.split_times is None or self.min_work_per_thread is None:
            return self.times
        return self.split_times if work // self.min_work_per_thread >= 2 else self.times

    def step_seconds(
        self, chunks: list[tuple[int, int]], heads: int, head_dim: int, notes: set[str] | None = None
    ) -> float:
        """One layer's prefill attention over a step's chunks (new tokens, context): one call of the
        layer, so its fixed cost (the grid's shortest sequence, which is little else) is paid once,
        and each chunk adds what its own sequence costs beyond it; whole or split by the call's work."""
        grid = self.grid_for(float(sum(n * ctx for n, ctx in chunks)) * heads * head_dim)
        floor = self.seconds(self.tokens[0], self.tokens[0], heads, head_dim, grid=grid)
        return floor + sum(max(self.seconds(n, ctx, heads, head_dim, notes, grid) - floor, 0.0) for n, ctx in chunks)

    def seconds(
        self,
        new: int,
        ctx: int,
        heads: int,
        head_dim: int,
        notes: set[str] | None = None,
        grid: list[list[float]] | None = None,
    ) -> float:
        """One layer's prefill attention of `new` tokens over a context of `ctx` (itself included), alone
        (whole or split as its own work picks, unless `grid` says which)."""
        s = math.sqrt(new * ctx)
        if grid is None:
            grid = self.grid_for(float(new) * ctx * heads * head_dim)
        ss = min(max(s, self.tokens[0]), self.tokens[-1])
        dd = min(max(head_dim, self.head_dims[0]), self.head_dims[-1])
        per_head = math.exp(loglog_bilinear(self.tokens, self.head_dims, grid, ss, dd))
        scale = (s * s) / (ss * ss) if s > ss else 1.0  # the scores' work beyond the longest sequence timed
        scale *= head_dim / dd if head_dim > dd else 1.0
        if notes is not None and (s > self.tokens[-1] * 1.001 or head_dim > self.head_dims[-1]):
            notes.add(
                f"prefill attention beyond the measured grid ({self.tokens[-1]} tokens, head dim "
                f"{self.head_dims[-1]}): scaled by its work from the edge"
            )
        return per_head * scale * heads
