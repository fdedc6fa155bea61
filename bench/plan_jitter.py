"""Does the step-time jitter make `llmdiag plan --fit` predict a run's held-out levels better?

Re-predicts the closed-loop runs that bench/plan_accuracy.py kept (`--keep-runs DIR`), measuring
nothing: each run is fitted to its lowest and highest concurrency at its first input length (the
bench's own choice), once with the step-time jitter measured from its concurrency-1 level (the
default) and once with `--steady-steps`; the other levels are held out. Per arm, the median and P90
of |error| over every held-out level of every run given, per metric, side by side.

    python bench/plan_jitter.py DIR [DIR ...] [--profile FILE] [--out FILE]
    python bench/plan_jitter.py --from-json FILE      # the tables of a recorded invocation again

Each DIR holds `run-<model>-<layout>` run directories and, unless --profile is given, the
`profile.json` they were predicted with.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the project first

from bench.common import machine, print_table, write_json
from bench.plan_accuracy import _fit_levels, _predict
from bench.prediction_errors import METRICS, median_p90

ARMS = {"jitter": (), "steady": ("--steady-steps",)}
CLOSED_LOOP_RUN = re.compile(r"run-[\w.-]+-(tp\d+|pp\d+)$")
LEVEL = re.compile(r"c(\d+)-in(\d+)-out(\d+)$")


def _fit_levels_of(level_ids: list[str]) -> list[str]:
    parsed = [tuple(map(int, m.groups())) for lid in level_ids if (m := LEVEL.match(lid))]
    if not parsed:
        raise SystemExit(f"no closed-loop levels among {level_ids}")
    concurrency = sorted({c for c, _, _ in parsed})
    first_input, output = parsed[0][1], parsed[0][2]
    return _fit_levels(level_ids, concurrency, first_input, output)


def predict_both(run: Path, profile: Path) -> dict:
    plain = _predict(run, profile)
    fit = _fit_levels_of([lv["level_id"] for lv in plain["levels"]])
    out = {"run": str(run), "fit_levels": fit}
    for arm, extra in ARMS.items():
        got = _predict(run, profile, "--fit", ",".join(fit), *extra)
        out[arm] = {"levels": got["levels"], "step_jitter": got["profile"].get("step_jitter")}
    return out


def pooled_errors(runs: list[dict], model: str | None = None) -> dict:
    """Per arm and metric: n, median and P90 of |error| over the held-out levels of `runs` (of one model)."""
    return {
        arm: {
            k: median_p90(
                lv["error"][k]
                for r in runs
                if model is None or f"run-{model}-" in Path(r["run"]).name
                for lv in r[arm]["levels"]
                if lv["role"] == "predicted" and lv["error"] and lv["error"][k] is not None
            )
            for k in METRICS
        }
        for arm in ARMS
    }


def print_pooled(runs: list[dict]) -> None:
    def cell(s: dict) -> str:
        return "-" if s["median"] is None else f"{s['median'] * 100:.1f}% / {s['p90'] * 100:.1f}% ({s['n']})"

    models = sorted({m.group(1) for r in runs if (m := re.match(r"run-(.+)-(?:tp|pp)\d+$", Path(r["run"]).name))})
    for model in (None, *models):
        pooled = pooled_errors(runs, model)
        n = sum(1 for r in runs if model is None or f"run-{model}-" in Path(r["run"]).name)
        print_table(
            f"held-out |error|, median / P90 (levels): {model or 'every model'}, {n} runs",
            ["arm", *METRICS],
            [[arm, *(cell(pooled[arm][k]) for k in METRICS)] for arm in ARMS],
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="*", type=Path, help="folders a plan_accuracy.py --keep-runs kept")
    p.add_argument("--profile", type=Path, default=None, help="default: each folder's profile.json")
    p.add_argument("--from-json", type=Path, default=None, help="print the tables of this recorded invocation")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    if a.from_json:
        print_pooled(json.loads(a.from_json.read_text())["runs"])
        return
    runs = []
    for d in a.dirs:
        profile = a.profile or d / "profile.json"
        for run in sorted(x for x in d.iterdir() if CLOSED_LOOP_RUN.match(x.name) and (x / "run.json").exists()):
            print(f"predicting {run} ...", file=sys.stderr)
            runs.append(predict_both(run, profile))
    if not runs:
        raise SystemExit(f"no run-<model>-<layout> directories in {', '.join(map(str, a.dirs)) or 'no folder'}")
    print_pooled(runs)
    write_json(
        a.out,
        {"bench": "plan_jitter", "args": vars(a), "machine": machine(), "runs": runs, "pooled": pooled_errors(runs)},
    )


if __name__ == "__main__":
    main()
