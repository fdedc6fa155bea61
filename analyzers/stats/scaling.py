"""How throughput scales with load: linearity, the knee, the ceiling and a note per level.

Levels are compared within a series: the same input and output lengths and the same kind of
load (concurrency or request rate), ordered by load. For consecutive levels the *scaling
efficiency* is the fraction of the added load that became added throughput:

    efficiency = (tput_i / tput_{i-1} - 1) / (load_i / load_{i-1} - 1)

1 is perfect (double the users, double the tokens/s), 0 is flat. A level whose efficiency from
the level below is under CEILING_EFFICIENCY is *near ceiling*: added load no longer buys
throughput, only queueing (latency climbs with it, by Little's law in a closed loop). The *knee*
is the last level before the first such step: the most load that still scaled. The seed's
case study (c=8 260, c=16 430, c=32 620, c=64 760 tok/s) has efficiencies 0.65, 0.44, 0.23: its
knee is c=32 and c=64 is near the ceiling, as the article says.

Notes, in the case study's words: `over SLO` (the level missed an SLO), `at target` (the
highest load of the series that met the SLO), `near ceiling` (see above), else `normal`.
`over SLO` and `at target` combine with `near ceiling`.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzers.stats.latency import LevelStats

CEILING_EFFICIENCY = 0.25


@dataclass
class ScalingPoint:
    level_id: str
    linearity: float | None  # tput / (tput of the series' lowest load × load ratio); 1 = linear
    efficiency: float | None  # vs the level below in the series (see the module doc)
    note: str


@dataclass
class Series:
    key: str  # e.g. "concurrency · in 512 · out 128"
    level_ids: list[str]  # ordered by load
    knee: str | None  # the last level that still scaled, or None if every step scaled
    best_within_slo: str | None  # the highest load that met the SLO
    # The level whose step up from the knee did not scale: the next level with a rate, which need not
    # be the next in `level_ids` (a level between them may have measured no rate)
    past_knee: str | None = None


def series_of(levels: list[LevelStats]) -> dict[str, list[LevelStats]]:
    groups: dict[str, list[LevelStats]] = {}
    for lv in levels:
        kind = "concurrency" if lv.concurrency is not None else "request rate"
        groups.setdefault(f"{kind} · in {lv.input_len} · out {lv.output_len}", []).append(lv)
    return {k: sorted(v, key=lambda lv: lv.load) for k, v in groups.items()}


def analyze_scaling(levels: list[LevelStats]) -> tuple[dict[str, ScalingPoint], list[Series]]:
    points: dict[str, ScalingPoint] = {}
    series = []
    for key, group in series_of(levels).items():
        base = next((lv for lv in group if (lv.steady_output_tok_s or 0) > 0 and lv.load > 0), None)
        met = [lv for lv in group if lv.slo_met]
        best = met[-1] if met else None
        knee: str | None = None
        past_knee: str | None = None
        prev: LevelStats | None = None
        for lv in group:
            # Nothing measured, or a window that caught one phase of its requests: no point on the curve.
            if lv.steady_output_tok_s is None:
                points[lv.level_id] = ScalingPoint(lv.level_id, None, None, _note(lv, best, False))
                continue
            linearity = (
                lv.output_tok_s / (base.output_tok_s * lv.load / base.load)
                if base is not None and lv.load > 0
                else None
            )
            eff = _efficiency(prev, lv)
            flat = eff is not None and eff < CEILING_EFFICIENCY
            if flat and knee is None and prev is not None:  # (flat: an efficiency, so a previous level)
                knee, past_knee = prev.level_id, lv.level_id
            points[lv.level_id] = ScalingPoint(lv.level_id, linearity, eff, _note(lv, best, flat))
            prev = lv
        series.append(Series(key, [lv.level_id for lv in group], knee, best.level_id if best else None, past_knee))
    return points, series


def _efficiency(prev: LevelStats | None, lv: LevelStats) -> float | None:
    if prev is None or prev.output_tok_s <= 0 or prev.load <= 0 or lv.load <= prev.load:
        return None
    return (lv.output_tok_s / prev.output_tok_s - 1) / (lv.load / prev.load - 1)


def _note(lv: LevelStats, best: LevelStats | None, flat: bool) -> str:
    if lv.n_in_window == 0:
        return "nothing measured"
    if lv.n_ok == 0:
        return "over SLO (no successful requests)"
    main = "over SLO" if lv.slo_met is False else ("at target" if best is lv else "normal")
    if lv.window_shorter_than_request:  # its tokens/s is one phase of its requests (docs/metrics.md)
        return f"{main} · window < request"
    if flat:
        return "near ceiling" if main == "normal" else f"{main} · near ceiling"
    return main


def best_level_within_slo(levels: list[LevelStats]) -> LevelStats | None:
    """The highest load that met every SLO (ties: the higher throughput): 'how far does it scale'."""
    ok = [lv for lv in levels if lv.slo_met]
    return max(ok, key=lambda lv: (lv.load, lv.output_tok_s)) if ok else None
