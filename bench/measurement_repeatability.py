"""How far apart are two measurements of the same levels? The floor under any prediction's error.

Two invocations of bench/plan_accuracy.py with the same arguments, on the same engine code (the
JSON's `machine.refengine_sha256_16`), measured the same closed-loop levels twice: same model, layout,
concurrency, input and output lengths, same window. Reading the first invocation's measurement as a
"prediction" of the second's, (first - second) / second is the error a perfect model of the first
run would make on the second: what this host's drift and the sweep's sampling leave to any model.
Its median and P90 over the levels the second bench held out sit beside that bench's own
prediction errors (bench/RESULTS.md); a prediction cannot be judged closer than this.

Open-loop and trace levels are not compared: their rates are a share of each invocation's own
measured peak, so the two invocations did not run the same level.

    python bench/measurement_repeatability.py FIRST_JSON SECOND_JSON [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the project first

from bench.common import print_table, write_json
from bench.prediction_errors import METRICS, median_p90


def closed_loop_levels(bench: dict) -> dict[tuple[str, str, str], dict]:
    """(model, layout, level id) -> the level's row under the fitted profile (its role and measured)."""
    return {
        (case["model"], case["layout"], lv["level_id"]): lv
        for case in bench["cases"]
        for lv in case["fitted"]["levels"]
        if lv.get("measured")
    }


def differences(first: dict, second: dict) -> list[dict]:
    """Per level both benches measured: (first - second) / second for each metric, and the second
    bench's role for it (fitted or held out)."""
    a, b = closed_loop_levels(first), closed_loop_levels(second)
    rows = []
    for key in sorted(a.keys() & b.keys()):
        ma, mb = a[key]["measured"], b[key]["measured"]
        diff = {
            k: (ma[k] - mb[k]) / mb[k] if ma.get(k) is not None and mb.get(k) not in (None, 0) else None
            for k in METRICS
        }
        rows.append({"model": key[0], "layout": key[1], "level_id": key[2], "role": b[key]["role"], "diff": diff})
    return rows


def spread(rows: list[dict], role: str | None) -> dict:
    """Median and P90 of |difference| per metric over the rows with that role (None: every row), taken
    as bench/prediction_errors.py takes the prediction errors', so the two tables compare."""
    return {
        k: median_p90(r["diff"][k] for r in rows if (role is None or r["role"] == role) and r["diff"][k] is not None)
        for k in METRICS
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("first", help="the earlier bench/plan_accuracy.py JSON")
    p.add_argument("second", help="the later one (its measurements are the reference)")
    p.add_argument("--out", default=None, help="write the differences and their spread as JSON")
    args = p.parse_args()
    first, second = (json.load(open(path)) for path in (args.first, args.second))
    engines = [b["machine"].get("refengine_sha256_16") for b in (first, second)]
    if engines[0] != engines[1]:
        raise SystemExit(f"the two benches ran different engine code ({engines[0]} vs {engines[1]}): not a repeat")
    rows = differences(first, second)
    if not rows:
        raise SystemExit("the two benches measured no closed-loop level in common")
    table = []
    for name, role in (("held out by the second bench", "predicted"), ("every level in common", None)):
        s = spread(rows, role)
        table.append([name, s[METRICS[0]]["n"], *(f"{s[k]['median']:.1%} / {s[k]['p90']:.1%}" for k in METRICS)])
    print_table(
        "two measurements of the same levels: |first - second| / second, median / P90", ["levels", "n", *METRICS], table
    )
    print_table(
        "per level: (first - second) / second",
        ["model", "layout", "level", "role", *METRICS],
        [
            [r["model"], r["layout"], r["level_id"], r["role"]]
            + ["-" if r["diff"][k] is None else f"{r['diff'][k]:+.0%}" for k in METRICS]
            for r in rows
        ],
    )
    write_json(
        args.out,
        {
            "bench": "measurement_repeatability",
            "first": args.first,
            "second": args.second,
            "refengine_sha256_16": engines[0],
            "levels": rows,
            "held_out": spread(rows, "predicted"),
            "all": spread(rows, None),
        },
    )


if __name__ == "__main__":
    main()
