"""The capacity search: the highest load that meets the SLO, found with as few measured levels as
it takes (a sweep's LevelPlan, so every probe is an ordinary level of an ordinary run directory).

1. Bracket: start at `start` and double while the level meets the SLO, until one misses (or
   `limit` is reached); when `start` itself misses, halve until one meets it (down to one user,
   or start / 64 by rate).
2. Bisect between the highest load that met it and the lowest that missed, until they are
   `resolution` apart (concurrency: an absolute step, integers; rate: a ratio, geometric means).
3. Confirm: measure the two boundary loads again (`repeats` times in all) and let
   analyzers.capacity.answer pool each load's requests; a boundary load whose pooled verdict is
   not clear (its TTFT P99 / TPOT P95 interval straddles the bound) gets its neighbour measured
   too, up to `max_extra` more loads, so the answer carries an interval.

Every decision is a function of the stats measured so far, so a resumed run re-decides the same
levels. A level "meets" the SLO only when its verdict is True: over capacity, cut short, INVALID
(the client fell behind) and too many errors all count as missing it, and the answer says which of
those bounded it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from analyzers.stats.latency import LevelStats
from loadgen.specs import LevelSpec, level_seed
from rundir import RunInfo
from rundir.capacity import CAPACITY_AXES, CapacityProbe, CapacityRecord, CapacitySearch


@dataclass
class SearchSpec(CapacitySearch):
    """The contract's search options (rundir.capacity.CapacitySearch, where the fields and their
    defaults live), validated in the options' words, with the search's arithmetic."""

    def __post_init__(self) -> None:
        if self.axis not in CAPACITY_AXES:
            raise ValueError(f"--by must be one of {', '.join(CAPACITY_AXES)}, got {self.axis!r}")
        if not self.start > 0 or self.limit < self.start:
            raise ValueError("the search needs 0 < start <= limit")
        if not self.resolution > 0 or (self.axis == "concurrency" and self.resolution < 1):
            raise ValueError("--resolution must be > 0 (and >= 1 for concurrency)")
        if self.repeats < 1:
            raise ValueError("--repeats must be >= 1")
        if self.trace_rate is not None and (self.axis != "rate" or not self.trace_rate > 0):
            raise ValueError("a trace is searched by rate (--by rate), at a mean rate > 0")

    def key(self, load: float) -> float:
        """The load as the search names it: an integer concurrency, a rate to 3 significant digits."""
        return float(max(1, round(load))) if self.axis == "concurrency" else float(f"{load:.3g}")

    def apart(self, lo: float, hi: float) -> bool:
        if self.axis == "concurrency":
            return hi - lo > self.resolution
        return hi / lo > 1 + self.resolution

    def between(self, lo: float, hi: float) -> float:
        mid = (lo + hi) / 2 if self.axis == "concurrency" else math.sqrt(lo * hi)
        return self.key(mid)

    def step_down(self, load: float) -> float:
        return self.key(load - self.resolution if self.axis == "concurrency" else load / (1 + self.resolution))

    def floor(self) -> float:
        """The lowest load the bracket goes down to when `start` already misses: one user, or
        start / 64 (six halvings) by rate."""
        return self.key(1 if self.axis == "concurrency" else self.start / 64)

    def trace_speed(self, load: float) -> float | None:
        """The speed a trace is replayed at to offer `load` req/s (None: not a trace)."""
        return None if self.trace_rate is None else load / self.trace_rate

    def step_up(self, load: float) -> float:
        return self.key(load + self.resolution if self.axis == "concurrency" else load * (1 + self.resolution))


class CapacityPlan:
    """A LevelPlan (llmbench.sweep.run) that searches instead of walking a grid."""

    def __init__(self, search: SearchSpec, template: LevelSpec, judge=None):
        self.search, self.template = search, template
        # judge(probes) -> the loads whose pooled verdict is unclear
        # (analyzers.capacity.answer through llmbench.capacity.cli); None: each level's own verdict.
        self.judge = judge
        self.probes: list[CapacityProbe] = []
        self._levels: list[LevelSpec] = []

    # ----- LevelPlan ---------------------------------------------------------------------------
    resume_command = "llmbench capacity --resume"

    def next_level(self, stats: dict[str, LevelStats]) -> LevelSpec | None:
        while True:
            for p in self.probes:
                if p.met is None and p.level_id in stats:
                    p.met = bool(stats[p.level_id].slo_met)
            if any(p.level_id not in stats for p in self.probes):
                return None  # the last level did not finish (stopped, gone): the search ends
            nxt = self._decide()
            if nxt is None:
                return None
            level = self._issue(*nxt)
            if level.level_id not in stats:
                return level
            # Measured by an earlier attempt (a resumed run): the decisions are a function of the
            # verdicts, so replaying them re-issues the same levels; take its verdict and go on.

    def issued(self) -> list[LevelSpec]:
        return list(self._levels)

    def note(self, info: RunInfo) -> None:
        # Copies: the record is what was decided so far, not the probes' later verdicts.
        record = info.sweep.capacity or CapacityRecord()
        info.sweep.capacity = dataclasses.replace(
            record, search=dataclasses.replace(self.search), probes=[dataclasses.replace(p) for p in self.probes]
        )

    # ----- the search --------------------------------------------------------------------------
    def verdicts(self) -> dict[float, list[bool]]:
        out: dict[float, list[bool]] = {}
        for p in self.probes:
            out.setdefault(p.load, []).append(bool(p.met))
        return out

    def bracket(self) -> tuple[float | None, float | None]:
        """(highest load that met the SLO below every load that missed it, lowest load that missed)."""
        v = self.verdicts()
        missed = [x for x, ms in v.items() if not ms[0]]
        hi = min(missed) if missed else None
        met = [x for x, ms in v.items() if ms[0] and (hi is None or x < hi)]
        return (max(met) if met else None), hi

    def _decide(self) -> tuple[float, str] | None:
        s, v = self.search, self.verdicts()
        lo, hi = self.bracket()
        if hi is None:  # still bracketing
            nxt = s.key(s.start if lo is None else lo * 2)
            if lo is not None and lo >= s.limit:
                return None  # met the SLO up to the limit
            return (min(nxt, s.key(s.limit)), "bracket")
        if lo is None:  # nothing met it yet: halve down to the floor
            down = max(s.key(hi / 2), s.floor())
            return None if down >= hi or hi <= s.floor() else (down, "bracket")
        if s.apart(lo, hi):
            mid = s.between(lo, hi)
            if mid not in v and lo < mid < hi:
                return (mid, "bisect")
        return self._confirm(lo, hi, v)

    def _confirm(self, lo: float, hi: float, v: dict[float, list[bool]]) -> tuple[float, str] | None:
        """Repeat the boundary loads; then, while a boundary load is unclear on its pooled requests,
        measure (and repeat) its outer neighbour, up to max_extra more loads."""
        confirm = [lo, hi] + [p.load for p in self.probes if p.phase == "confirm" and p.load not in (lo, hi)]
        for load in dict.fromkeys(confirm):
            if len(v[load]) < self.search.repeats:
                return (load, "confirm")
        if self.judge is None or len(set(confirm)) - 2 >= self.search.max_extra:
            return None
        unclear = self.judge(self.probes)
        lows = sorted(x for x in set(confirm) if x <= lo)
        highs = sorted(x for x in set(confirm) if x >= hi)
        if lows[0] in unclear:
            below = self.search.step_down(lows[0])
            if below < lows[0] and below >= self.search.key(self.search.start):
                return (below, "confirm")
        if highs[-1] in unclear:
            above = self.search.step_up(highs[-1])
            if above > highs[-1] and above <= self.search.key(self.search.limit):
                return (above, "confirm")
        return None

    def _issue(self, load: float, phase: str) -> LevelSpec:
        n = sum(1 for p in self.probes if p.load == load)
        t = self.template
        base = f"c{int(load)}" if self.search.axis == "concurrency" else f"r{load:g}"
        level_id = f"{base}-in{t.input_len}-out{t.output_len}" + (f"-r{n + 1}" if n else "")
        spec = dataclasses.replace(
            t,
            level_id=level_id,
            concurrency=int(load) if self.search.axis == "concurrency" else None,
            request_rate=load if self.search.axis == "rate" else None,
            trace_speed=self.search.trace_speed(load),
            seed=level_seed(t.seed, level_id),
        )  # each load, and each repeat of one, a fresh sample: not the prompts a server has cached
        self.probes.append(CapacityProbe(level_id, load, phase))
        self._levels.append(spec)
        return spec
