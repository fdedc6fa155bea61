"""The errors of bench/plan_accuracy.py's predictions, summed up and printed: per case and mode the
median |error| of each metric (fitted and held-out levels apart), the held-out levels pooled over
every case (median and P90: the issue's goal is stated over these), and the tables.

A case is one model at one layout: its closed-loop levels under the calibrated and the fitted
profile, and its open-loop and trace runs' levels (every one held out).
"""

from __future__ import annotations

import statistics

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


def pooled(cases: list[dict]) -> dict:
    """Median and P90 of |error| over every held-out level of every case (closed and open loop),
    with the fitted profile: the issue's goal is stated over these."""
    out = {}
    for k in METRICS:
        errs = sorted(
            abs(lv["error"][k])
            for c in cases
            for lv, _ in case_levels(c, "fitted")
            if lv["role"] == "predicted" and lv["error"] and lv["error"][k] is not None
        )
        out[k] = {
            "n": len(errs),
            "median": statistics.median(errs) if errs else None,
            "p90": errs[min(len(errs) - 1, int(0.9 * len(errs)))] if errs else None,
        }
    return out
