"""How far a healthy run's levels depart from their prediction: the band a sweep report's departure
must exceed to be a finding (analyzers/plan/departures.py), read from bench/plan_accuracy.py runs.

A departure is measured / predicted - 1, beyond a band b when the ratio is over 1 + b or under
1 / (1 + b); so each level's size here is |ln(measured / predicted)|, and a quantile q of it reads
as the band exp(q) - 1. Two profiles, as a sweep can be given either:

- "calibrated": the plan bench's `llmdiag calibrate --serve` profile, every level (it fits none);
- "fitted": the profile fitted to two levels of the same run, its held-out levels only.

Every level here is a healthy measurement (nothing planted, the bench alone on the host), so a band
at or above the largest P99 of the two leaves about 1 level in 100 of a healthy run beyond it; the
table also says how many levels lie beyond the bands in force (analyzers/plan/departures.py) and beyond
50% (the band before them).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the project first

from analyzers.plan.departures import DEPARTURE_BAND
from bench.common import print_table
from bench.prediction_errors import METRICS, case_levels

QUANTILES = (50, 90, 95, 99)


def size(lv: dict, metric: str) -> float | None:
    """|ln(measured / predicted)| of one level's metric; None without both figures."""
    m, p = (lv.get("measured") or {}).get(metric) or 0, (lv.get("predicted") or {}).get(metric) or 0
    return abs(math.log(m / p)) if m > 0 and p > 0 else None


def judged(lv: dict, mode: str) -> bool:
    """Every level under the calibrated profile; under the fitted one, the held-out levels only."""
    return mode == "calibrated" or lv["role"] == "predicted"


def level_sizes(bench: dict, mode: str) -> dict[str, list[float]]:
    """Each metric's sizes over the bench's judged levels under one profile (closed loop, open loop, trace)."""
    out: dict[str, list[float]] = {k: [] for k in METRICS}
    for case in bench["cases"]:
        for lv, _kind in case_levels(case, mode):
            if judged(lv, mode):
                for k in METRICS:
                    if (v := size(lv, k)) is not None:
                        out[k].append(v)
    return out


def band_of(log_size: float) -> float:
    return math.exp(log_size) - 1


def share_beyond(sizes: np.ndarray, band: float | None) -> float | None:
    """The share of levels whose departure is past `band` either way (None: no band)."""
    return None if band is None else float((sizes > math.log(1 + band)).mean())


# The bands in force until bench/RESULTS.md's section on this script (TPOT P50 and output tok/s only).
BAND_BEFORE = {"tpot_p50_s": 0.5, "output_tok_s": 0.5}


def sweeps_with_a_finding(benches: list[dict], mode: str, bands: dict[str, float]) -> tuple[int, int]:
    """(closed-loop sweeps with at least one level past a band, sweeps): a sweep is one model at one
    layout, its eight levels under the calibrated profile or its six held-out ones under the fitted."""
    hit = total = 0
    for bench in benches:
        for case in bench["cases"]:
            total += 1
            hit += any(
                (v := size(lv, k)) is not None and v > math.log(1 + b)
                for lv in case[mode]["levels"]
                if judged(lv, mode)
                for k, b in bands.items()
            )
    return hit, total


def summarize(benches: list[dict]) -> dict:
    sizes = {
        mode: {k: np.array([x for b in benches for x in level_sizes(b, mode)[k]]) for k in METRICS}
        for mode in ("calibrated", "fitted")
    }
    stats = {
        mode: {
            k: {
                "n": len(v),
                **{f"p{q}": band_of(float(np.percentile(v, q))) for q in QUANTILES},
                "max": band_of(float(v.max())),
                "beyond_50pct": share_beyond(v, 0.5),
                "beyond_band_in_force": share_beyond(v, DEPARTURE_BAND.get(k)),
            }
            for k, v in per_metric.items()
        }
        for mode, per_metric in sizes.items()
    }
    # The larger P99 of the two profiles, rounded up to the next 10%: the rule the bands in force follow
    p99_band = {k: math.ceil(max(stats[m][k]["p99"] for m in stats) * 10 - 1e-9) / 10 for k in METRICS}
    for mode, per_metric in sizes.items():
        for k, v in per_metric.items():
            stats[mode][k]["beyond_p99_band"] = share_beyond(v, p99_band[k])
    sweeps = {
        mode: {
            name: sweeps_with_a_finding(benches, mode, bands)
            for name, bands in (("before", BAND_BEFORE), ("in_force", DEPARTURE_BAND))
        }
        for mode in sizes
    }
    return {
        "band_in_force": dict(DEPARTURE_BAND),
        "band_before": BAND_BEFORE,
        "p99_band": p99_band,
        "by_profile": stats,
        "sweeps_with_a_finding": sweeps,
    }


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _share(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench_json", nargs="+", help="bench/plan_accuracy.py outputs (runs of different days)")
    ap.add_argument("--out", type=Path, help="write the summary as JSON")
    a = ap.parse_args()
    benches = [json.loads(Path(p).read_text()) for p in a.bench_json]
    result = {"inputs": a.bench_json, **summarize(benches)}
    rows = []
    for mode, per_metric in result["by_profile"].items():
        for k, s in per_metric.items():
            rows.append(
                [mode, k, s["n"], *(_pct(s[f"p{q}"]) for q in QUANTILES), _pct(s["max"])]
                + [_share(s["beyond_50pct"])]
                + [f"{_pct(result['p99_band'][k])}: {_share(s['beyond_p99_band'])}"]
                + [f"{_pct(result['band_in_force'].get(k))}: {_share(s['beyond_band_in_force'])}"]
            )
    print_table(
        "departure |measured / predicted| of healthy levels, as a band (exp(quantile of |ln ratio|) - 1)",
        [
            "profile",
            "metric",
            "n",
            *(f"P{q}" for q in QUANTILES),
            "max",
            "beyond 50%",
            "P99 band: beyond",
            "in force: beyond",
        ],
        rows,
    )
    print_table(
        "closed-loop sweeps of healthy levels with at least one departure finding",
        ["profile", "bands before (TPOT P50, output tok/s ±50%)", "bands in force"],
        [
            [mode, *(f"{h} of {n}" for h, n in (v["before"], v["in_force"]))]
            for mode, v in result["sweeps_with_a_finding"].items()
        ],
    )
    if a.out:
        a.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
