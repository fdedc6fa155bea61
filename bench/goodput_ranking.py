"""Does the plan's ranking of layouts agree with the ranking their measured sweeps give? (issue 28)

For one model, each layout (TP1, TP2, PP2) was swept over the same closed-loop levels; a layout's
goodput at an input length is the highest output tokens/s among its levels at that length whose
TTFT P99 and TPOT P95 met the SLO (0 where none did), read once from the measurements and once from
each profile's predictions of the same levels. Layouts are ranked by goodput, measured and
predicted, and the rankings compared pair by pair (a pair agrees when both say the same layout is
ahead; a pair the measurement calls level, within TIE, agrees either way).

The SLO is the model's own: SLO_TIMES x the TTFT P99 and TPOT P95 that its TP1 concurrency-1 level
measured at that input length (a single user on the simplest layout), so the bound binds on every
model alike; `None` (no SLO) ranks on peak throughput.
"""

from __future__ import annotations

import itertools

from analyzers.plan.predict import slo_met

SLO_TIMES = 3.0
TIE = 0.05  # measured goodputs within 5% of each other: the order between them is noise on two cores


def _input_len(level_id: str) -> int | None:
    for part in level_id.split("-"):
        if part.startswith("in") and part[2:].isdigit():
            return int(part[2:])
    return None


def _closed(level_id: str) -> bool:
    return level_id.startswith("c")


def _meets(values: dict, slo: tuple[float, float] | None) -> bool:
    return slo is None or slo_met(values.get("ttft_p99_s"), values.get("tpot_p95_s"), *slo)


def goodput(levels: list[dict], side: str, input_len: int, slo: tuple[float, float] | None) -> float:
    """`side` is "measured" or "predicted": the best output tok/s of the closed-loop levels within the SLO.
    Both sides read the same levels: those whose measurement is a rate (a window shorter than its
    requests measured none, docs/metrics.md), so a prediction is not ranked on a level the
    measurement could not rank."""
    best = 0.0
    for lv in levels:
        values = lv.get(side) or {}
        if not _closed(lv["level_id"]) or _input_len(lv["level_id"]) != input_len or not values:
            continue
        if (lv.get("measured") or {}).get("output_tok_s") is None:
            continue
        if _meets(values, slo):
            best = max(best, values.get("output_tok_s") or 0.0)
    return best


def model_slo(cases: list[dict], input_len: int) -> tuple[float, float] | None:
    """SLO_TIMES x what TP1's lowest concurrency measured at this input length (None without a TP1 case)."""
    for case in cases:
        if case["layout"] != "tp1":
            continue
        closed = [lv for lv in case["calibrated"]["levels"] if _closed(lv["level_id"])]
        closed = [lv for lv in closed if _input_len(lv["level_id"]) == input_len and lv.get("measured")]
        if not closed:
            return None
        first = min(closed, key=lambda lv: int(lv["level_id"].split("-")[0][1:]))["measured"]
        if first.get("ttft_p99_s") is None or first.get("tpot_p95_s") is None:
            return None
        return SLO_TIMES * first["ttft_p99_s"], SLO_TIMES * first["tpot_p95_s"]
    return None


def _agreement(measured: dict[str, float], predicted: dict[str, float]) -> tuple[int, int]:
    """(pairs that agree, pairs) over every pair of layouts."""
    agree = pairs = 0
    for x, y in itertools.combinations(sorted(measured), 2):
        pairs += 1
        m, p = measured[x] - measured[y], predicted[x] - predicted[y]
        if abs(m) <= TIE * max(measured[x], measured[y]) or m * p > 0:
            agree += 1
    return agree, pairs


def rank_layouts(cases: list[dict]) -> list[dict]:
    """One row per model, input length and SLO (the model's own, and none): goodputs and agreement."""
    rows = []
    by_model: dict[str, list[dict]] = {}
    for case in cases:
        by_model.setdefault(case["model"], []).append(case)
    for model, model_cases in by_model.items():
        if len(model_cases) < 2:
            continue
        lengths = sorted({n for lv in model_cases[0]["calibrated"]["levels"] if (n := _input_len(lv["level_id"]))})
        for input_len in lengths:
            for slo in (model_slo(model_cases, input_len), None):
                measured = {
                    c["layout"]: goodput(c["calibrated"]["levels"], "measured", input_len, slo) for c in model_cases
                }
                row = {
                    "model": model,
                    "input_len": input_len,
                    "slo": None if slo is None else {"ttft_p99_s": slo[0], "tpot_p95_s": slo[1]},
                    "measured": measured,
                    "measured_order": sorted(measured, key=lambda k: -measured[k]),
                }
                for mode in ("calibrated", "fitted"):
                    predicted = {
                        c["layout"]: goodput(c[mode]["levels"], "predicted", input_len, slo) for c in model_cases
                    }
                    agree, pairs = _agreement(measured, predicted)
                    row[mode] = {
                        "predicted": predicted,
                        "order": sorted(predicted, key=lambda k: -predicted[k]),
                        "pairs_agree": agree,
                        "pairs": pairs,
                    }
                rows.append(row)
    return rows
