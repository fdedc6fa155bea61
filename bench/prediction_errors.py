"""The errors of bench/plan_accuracy.py's predictions, summed up and printed: per case and mode the
median |error| of each metric (fitted and held-out levels apart), the held-out levels pooled over
every case (median and P90: the issue's goal is stated over these), and the tables.

A case is one model at one layout: its closed-loop levels under the calibrated and the fitted
profile, and its open-loop and trace runs' levels (every one held out).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the project first

from bench.common import print_table

METRICS = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p95_s", "output_tok_s")


def medians(rows: list[dict], role: str) -> dict:
    out = {}
    for k in METRICS:
        errs = [abs(r["error"][k]) for r in rows if r["role"] == role and r["error"] and r["error"][k] is not None]
        out[k] = statistics.median(errs) if errs else None
    return out


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.0%}"


def print_levels(cases: list[dict]) -> None:
    rows = []
    for case in cases:
        for mode in ("calibrated", "fitted"):
            for lv, kind in case_levels(case, mode):
                e = lv["error"] or {}
                role = lv["role"] + (f" ({kind})" if kind else "")
                name = f"{case['model']} {case['layout']}"
                rows.append([name, mode, lv["level_id"], role, *(_pct(e.get(k)) for k in METRICS)])
    print_table(
        "plan accuracy: (predicted - measured) / measured", ["model", "profile", "level", "role", *METRICS], rows
    )


def print_ranking(ranking: list[dict]) -> None:
    def order(goodputs: dict, keys: list[str]) -> str:
        return " > ".join(f"{k} {goodputs[k]:.0f}" for k in keys)

    rows = []
    for r in ranking:
        slo = (
            "none"
            if r["slo"] is None
            else f"{r['slo']['ttft_p99_s'] * 1e3:.0f} / {r['slo']['tpot_p95_s'] * 1e3:.0f} ms"
        )
        rows.append(
            [r["model"], r["input_len"], slo, order(r["measured"], r["measured_order"])]
            + [
                f"{order(r[m]['predicted'], r[m]['order'])} ({r[m]['pairs_agree']}/{r[m]['pairs']})"
                for m in ("calibrated", "fitted")
            ]
        )
    print_table(
        "layouts ranked by goodput (output tok/s within the SLO TTFT P99 / TPOT P95; pairs agreeing)",
        ["model", "input", "SLO", "measured", "calibrated profile", "fitted profiles"],
        rows,
    )


def case_levels(case: dict, mode: str) -> list[tuple[dict, str]]:
    """A case's levels under one profile, each with its run's kind: "" (closed loop), "open loop", "trace"."""
    out = [(lv, "") for lv in case[mode]["levels"]]
    for key, kind in (("open_loop", "open loop"), ("trace", "trace")):
        if case.get(key):
            out += [(lv, kind) for lv in case[key][mode]["levels"]]
    return out


def median_p90(values) -> dict:
    """n, median and P90 of |value| (the P90 the sorted values' 90th-percent rank, no interpolation)."""
    errs = sorted(abs(v) for v in values)
    return {
        "n": len(errs),
        "median": statistics.median(errs) if errs else None,
        "p90": errs[min(len(errs) - 1, int(0.9 * len(errs)))] if errs else None,
    }


def pooled(cases: list[dict], kinds: tuple[str, ...] = ("", "open loop", "trace")) -> dict:
    """Median and P90 of |error| over every held-out level of every case (closed and open loop,
    trace; or the `kinds` given), with the fitted profile: the issue's goal is stated over these."""
    return {
        k: median_p90(
            lv["error"][k]
            for c in cases
            for lv, kind in case_levels(c, "fitted")
            if kind in kinds and lv["role"] == "predicted" and lv["error"] and lv["error"][k] is not None
        )
        for k in METRICS
    }


def _pooled_row(name: str, p: dict) -> list[str]:
    n = f"{p['ttft_p50_s']['n']} ({p['output_tok_s']['n']})"
    return [name, n, *(f"{p[k]['median']:.1%} / {p[k]['p90']:.1%}" if p[k]["n"] else "-" for k in METRICS)]


def print_pooled_by_kind(cases: list[dict]) -> None:
    """The held-out pooled table, all levels, each kind of run, each model and each layout apart
    (bench/RESULTS.md's table)."""
    rows = []
    for name, kinds in (
        ("all", ("", "open loop", "trace")),
        ("closed loop", ("",)),
        ("open loop", ("open loop",)),
        ("trace", ("trace",)),
    ):
        rows.append(_pooled_row(name, pooled(cases, kinds)))
    for model in dict.fromkeys(c["model"] for c in cases):  # every kind of run, one model's cases
        rows.append(_pooled_row(f"{model} (every kind)", pooled([c for c in cases if c["model"] == model])))
    for layout in dict.fromkeys(c["layout"] for c in cases):  # every kind of run, one layout's cases
        rows.append(_pooled_row(f"{layout} (every kind)", pooled([c for c in cases if c["layout"] == layout])))
    print_table("held out (fitted profiles), median / P90 of |error|", ["levels", "n (tok/s)", *METRICS], rows)


if __name__ == "__main__":
    import argparse
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench_json", help="a bench/plan_accuracy.py output")
    print_pooled_by_kind(json.loads(Path(ap.parse_args().bench_json).read_text())["cases"])
