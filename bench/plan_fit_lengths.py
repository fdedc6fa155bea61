"""Does fitting to a second prompt length help `llmdiag plan` predict the levels it did not see?

bench/plan_accuracy.py fits each run's profile to two levels at the first input length (the lowest
and the highest concurrency) and holds out the rest. At one prompt length, a cost the served engine
pays per prefill (fixed) and one that grows with the prompt (proportional) move the fitted levels
alike, so the fit can read the first as the second (operators slower by x, a share of them at fewer
threads) and carry it, multiplied, to longer prompts. Here the same kept runs are predicted twice in
one invocation: fitted as plan_accuracy.py does, and fitted to the lowest concurrency of each other
input length as well. Measuring nothing: the runs are a `plan_accuracy.py --keep-runs` folder's.

Both are scored on the levels both held out (every closed-loop level but the fitted ones, every
open-loop and trace level): median and P90 of |error| per metric, pooled and by kind of run.

    python bench/plan_fit_lengths.py --from-runs DIR [--models ...] [--layouts ...] [--concurrency 1,4,8,16]
                                     [--input-lens 128,512] [--rate 70%] [--trace-share 50%] [--out FILE]

(the same --models, --layouts, --concurrency, --input-lens, --rate and --trace-share the runs were
kept with). It rewrites the folder's fitted-*.json and writes fitted-*-every-length.json beside them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the project first

from bench.common import machine, print_table, write_json
from bench.plan_accuracy import _model_case
from bench.prediction_errors import METRICS, case_levels, median_p90

PROTOCOLS = {"first length": False, "every length": True}  # fit_every_length
KINDS = {"all": ("", "open loop", "trace"), "closed loop": ("",), "open loop": ("open loop",), "trace": ("trace",)}


def _held_out(case: dict, kinds: tuple[str, ...]) -> dict[tuple[str, str], dict]:
    """(kind, level_id) -> the level's errors, for the levels this case held out."""
    return {
        (kind, lv["level_id"]): lv["error"]
        for lv, kind in case_levels(case, "fitted")
        if kind in kinds and lv["role"] == "predicted" and lv["error"]
    }


def compare(pairs: list[dict[str, dict]]) -> dict:
    """Per kind and protocol, median / P90 |error| of each metric over the levels every protocol held out."""
    out: dict = {}
    for kind_name, kinds in KINDS.items():
        out[kind_name] = {}
        per_protocol = {name: [_held_out(p[name], kinds) for p in pairs] for name in PROTOCOLS}
        common = [set.intersection(*(set(per_protocol[n][i]) for n in PROTOCOLS)) for i in range(len(pairs))]
        for name in PROTOCOLS:
            out[kind_name][name] = {
                k: median_p90(
                    per_protocol[name][i][key][k]
                    for i in range(len(pairs))
                    for key in sorted(common[i])
                    if per_protocol[name][i][key].get(k) is not None
                )
                for k in METRICS
            }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--from-runs", required=True, help="a bench/plan_accuracy.py --keep-runs folder")
    p.add_argument("--models", default="tiny-test,tiny,random")
    p.add_argument("--layouts", default="tp1,tp2,pp2")
    p.add_argument("--concurrency", default="1,4,8,16")
    p.add_argument("--input-lens", default="128,512")
    p.add_argument("--rate", default="70%")
    p.add_argument("--trace-share", default="50%")
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    a.concurrency = [int(x) for x in a.concurrency.split(",")]
    a.input_lens = [int(x) for x in a.input_lens.split(",")]
    a.rate = [x for x in a.rate.split(",") if x]
    # What plan_accuracy's _model_case reads of its arguments beyond these (nothing is measured).
    a.warmup, a.duration, a.max_duration, a.trace_span = None, 10.0, 60.0, 20.0
    work = Path(a.from_runs)
    profile = work / "profile.json"
    t0 = time.monotonic()
    pairs = []
    for model in a.models.split(","):
        for layout in a.layouts.split(","):
            pairs.append(
                {name: _model_case(model, layout, a, profile, work, every) for name, every in PROTOCOLS.items()}
            )
            print(f"{model} {layout}: fitted to {', '.join(pairs[-1]['every length']['fit_levels'])}")
    result = compare(pairs)
    rows = [
        [kind, name, str(r["ttft_p50_s"]["n"]), *(f"{r[k]['median']:.1%} / {r[k]['p90']:.1%}" for k in METRICS)]
        for kind, by_protocol in result.items()
        for name, r in by_protocol.items()
        if r["ttft_p50_s"]["n"]
    ]
    print_table("held out by both fits, median / P90 |error|", ["levels", "fitted to", "n", *METRICS], rows)
    fits = {
        f"{pr[next(iter(PROTOCOLS))]['model']} {pr[next(iter(PROTOCOLS))]['layout']}": {
            name: {"fit_levels": c["fit_levels"], "fit": c["fitted"]["profile"]["assumptions"][-1]}
            for name, c in pr.items()
        }
        for pr in pairs
    }
    write_json(
        a.out,
        {"bench": "plan_fit_lengths", "args": vars(a), "machine": machine(), "wall_s": round(time.monotonic() - t0),
         "compare": result, "fits": fits, "cases": pairs},
    )  # fmt: skip


if __name__ == "__main__":
    main()
