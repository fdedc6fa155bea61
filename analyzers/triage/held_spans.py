"""Where a condition sampled by probe intervals held: the best estimate, and the part it surely held.

A probe sample is an average over its interval (other processes' cores over the last second). In a
run of held intervals, the plateau is the intervals at PLATEAU of the run's peak or more: the
condition held through them. The intervals before the plateau (the condition starting) and after it
(ending) held it for part of their time: together they are taken to hold it at its peak for the sum
of level / peak x their length, placed next to the plateau (it started late, it ended early). That
estimate is where a request counts as exposed (exposure.py); untrimmed, the second in which a
neighbour exited exposes every request of the recovery that follows it, and a closed loop sends
most of its requests then (bench/diagnosis_family.py --seed 6, draws 16 and 32: a 76x stall read as
1.1x). The estimate can still reach into the calm (a neighbour whose exit fell over two probe
seconds, 0.97 and 0.42 cores of 1.6, estimated to end 0.24 s after it did: --seed 9, draw 5, where
that calm's fast requests outnumbered the stall's and an 8.2x effect read 1.1x), so how much the
condition slows a request is read on the plateau alone (`sure`), where it held for certain.

A run of one or two intervals is all edges: its own peak is itself a part of an interval. It is set
against the highest level an interior interval of another run read, where one did (a neighbour back
for 0.8 s of each of two seconds read 1.27 and 1.33 cores against 1.6, and exposed the calm beside
it, in which a closed loop sent 25 requests to its 3: --seed 8, draw 9, 31.8x read as 1.1x). A run
with no interval on its plateau is trimmed the same way about the boundary between its first and
last intervals (the first to its end, the last to its start), and that is all that is known of it;
a lone interval is kept whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from analyzers.triage.tail_windows import Window

PLATEAU = 0.9  # a held interval at this share of its run's peak or more held the condition throughout


@dataclass(frozen=True)
class HeldSpans:
    held: list[Window]  # the best estimate: plateaus, and their partial edges trimmed next to them
    sure: list[Window] = field(default_factory=list)  # where it held for certain: the plateaus

    @property
    def seconds(self) -> float:
        """How long it held, by the estimate."""
        return sum(w.seconds for w in self.held)


def held_spans(start: np.ndarray, end: np.ndarray, held: np.ndarray, level: np.ndarray) -> HeldSpans:
    """The probe intervals [start, end] where `held` is True, read by their `level` (module docstring)."""
    runs = _runs(start, end, held)
    interior = [float(np.max(level[i + 1 : j])) for i, j in runs if j - i >= 2]
    full = max(interior) if interior else 0.0
    out: list[Window] = []
    sure: list[Window] = []
    for i, j in runs:
        peak = float(np.max(level[i : j + 1]))
        if j - i < 2:
            peak = max(peak, full)
        share = {k: min(1.0, float(level[k]) / peak) if peak > 0 else 1.0 for k in range(i, j + 1)}
        plateau = [k for k in range(i, j + 1) if share[k] >= PLATEAU]
        if not plateau:
            trimmed = _all_edges(start, end, i, j, share)
            out.extend(trimmed)
            sure.extend(trimmed)
            continue
        first, last = plateau[0], plateau[-1]
        lead = sum(share[k] * float(end[k] - start[k]) for k in range(i, first))
        trail = sum(share[k] * float(end[k] - start[k]) for k in range(last + 1, j + 1))
        middle = [Window(float(start[k]), float(end[k])) for k in range(first, last + 1)]
        sure.extend(middle)
        if lead > 0:
            out.append(Window(max(float(start[i]), float(start[first]) - lead), float(start[first])))
        out.extend(middle)
        if trail > 0:
            out.append(Window(float(end[last]), min(float(end[j]), float(end[last]) + trail)))
    return HeldSpans(out, sure)


def _runs(start: np.ndarray, end: np.ndarray, held: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) index of each run of held intervals that follow one another."""
    runs: list[tuple[int, int]] = []
    i, n = 0, len(held)
    while i < n:
        if not held[i]:
            i += 1
            continue
        j = i
        while j + 1 < n and held[j + 1] and start[j + 1] <= end[j] + 1e-9:
            j += 1
        runs.append((i, j))
        i = j + 1
    return runs


def _all_edges(start: np.ndarray, end: np.ndarray, i: int, j: int, share: dict[int, float]) -> list[Window]:
    """A run with no interval on its plateau: the first trimmed to its end, the last to its start (a
    lone interval has no side to trim toward and is kept whole)."""
    out = []
    for k in range(i, j + 1):
        a, b = float(start[k]), float(end[k])
        if k == i and k < j:
            a = b - share[k] * (b - a)
        elif k == j and k > i:
            b = a + share[k] * (b - a)
        out.append(Window(a, b))
    return out
