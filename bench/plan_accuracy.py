"""How well does `llmdiag plan` predict refengine? Calibrate this machine, then for each model and
parallel layout run a real sweep (the embedded engine, `llmbench sweep`: the sweep's own sized
warm-up, a fixed --duration window) over concurrencies and two input lengths, and predict every
level from the run's own spec with `llmdiag plan --predict-sweep`: once with the calibrated profile
alone, once fitted to a few levels (`--fit`), the others held out. Per level: the error of TTFT
P50/P99, TPOT P50/P95 and output tokens/s; per mode the median absolute error, fitted and held-out
levels apart. Goal (issue 28): median |error| <= 10% and P90 <= 20% on output throughput and TPOT
P50, <= 25% on the P99s, and layouts ranked by measured goodput as the predictions rank them.

    python bench/plan_accuracy.py [--models tiny-test,tiny,random] [--layouts tp1,tp2,pp2] [--concurrency 1,4,8,16]
                                  [--input-lens 128,512] [--rate 2|70%] [--trace-share 50%] [--output-len 64]
                                  [--warmup S] [--duration 10] [--max-duration 60]
                                  [--profile FILE] [--no-serve] [--seeds N] [--quick] [--out bench/plan_accuracy.json]
                                  [--keep-runs DIR | --from-runs DIR]

--layouts runs each model at each parallel layout (TP and PP ranks over gloo on this CPU); --rate adds
one open-loop run per model and layout, --trace-share one replay of a bursty trace
(bench/plan_trace.py) at that share of the layout's closed-loop peak; their levels are all held out
(predicted by the calibrated profile and by the profile fitted to that model and layout's
closed-loop levels). The JSON's `held_out_pooled` gives the median and P90 |error| over every
held-out level, `ranking` the layouts ranked by goodput (bench/goodput_ranking.py).

Calibration is `llmdiag calibrate --serve` (its overheads fitted to a short sweep of the bundled
tiny-test server, ~40 s) unless --no-serve: the "calibrated" rows say how well a machine profile
predicts levels and models it was not fitted on.

"random" is a random Llama checkpoint of shapes neither built-in model has (hidden 512, 4 layers, 8
heads without GQA, untied), written with refengine's own checkpoint writer.

Run time on a quiet 2-core machine: about 2.5 minutes for --quick (tiny-test at TP1, concurrency
1, 4 and 8, one input length, 6-s windows); each model and layout adds about 20 s per level (a
sized warm-up of at least 5 s, the window, the drain) plus the engine's start. On a shared machine
every figure is indicative only: calibration and the sweep both measure whatever else runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import machine, verdict, write_json  # noqa: E402
from bench.goodput_ranking import rank_layouts  # noqa: E402
from bench.plan_trace import BLOCK, mean_output_len, write_bursty_trace  # noqa: E402
from bench.prediction_errors import medians, pooled, print_levels, print_ranking  # noqa: E402

GOAL = 0.10
# "random" in --models: a random Llama checkpoint of shapes neither built-in model has (no GQA, 4
# layers of hidden 512, untied), written by refengine's own checkpoint writer.
RANDOM_SHAPE = dict(
    hidden_size=512,
    num_layers=4,
    num_heads=8,
    num_kv_heads=8,
    head_dim=64,
    intermediate_size=1536,
    tie_word_embeddings=False,
    seed=5,
)


def _model_path(model: str, work: Path) -> str:
    if model != "random":
        return model
    from refengine.model.tiny import Preset, write_checkpoint

    out = work / "random-llama-512x4"
    if not out.exists():
        out.mkdir(parents=True)
        write_checkpoint(Preset(**RANDOM_SHAPE), out)
    return str(out)


def _run(cmd: list[str]) -> str:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)  # keep the caller's
    env = {**os.environ, "PYTHONPATH": path, "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", *cmd], cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def _fit_levels(
    levels: list[str], concurrency: list[int], input_len: int, output_len: int, more_lengths: tuple[int, ...] = ()
) -> list[str]:
    """The lowest and highest concurrency at the first input length, and the lowest at each of
    `more_lengths` (bench/plan_fit_lengths.py): the others are held out."""
    picks = [f"c{c}-in{input_len}-out{output_len}" for c in (min(concurrency), max(concurrency))]
    picks += [f"c{min(concurrency)}-in{n}-out{output_len}" for n in more_lengths]
    return [lid for lid in dict.fromkeys(picks) if lid in levels]


# --layouts: the embedded engine's parallel layout, as `llmbench serve` flags (gloo ranks on this CPU).
LAYOUTS = {
    "tp1": [],
    "tp2": ["--engine-arg=--tensor-parallel-size=2"],
    "pp2": ["--engine-arg=--pipeline-parallel-size=2"],
}


LATENCY_BENCH_SLO_TTFT_S = 60.0


def _timeline(a) -> list[str]:
    """Fixed --warmup when given; otherwise the sweep's own sized warm-up (at least 5 s and until every
    user has finished a request, at most --max-duration), which the planner simulates too."""
    if a.warmup is not None:
        return ["--warmup", str(a.warmup), "--duration", str(a.duration)]
    return ["--duration", str(a.duration), "--max-duration", str(a.max_duration)]


def _sweep(model: str, layout: str, a, work: Path, out: Path, load: list[str], input_lens: list[int]) -> float:
    if a.from_runs:
        if not (out / "run.json").exists():
            raise SystemExit(f"--from-runs: no run {out} (was it kept with these --models and --layouts?)")
        return 0.0  # measured before: predicted again
    t0 = time.monotonic()
    lengths = ["--input-len", ",".join(map(str, input_lens)), "--output-len", str(a.output_len)] if input_lens else []
    _run(
        ["llmbench.cli", "sweep", "--model", _model_path(model, work), *LAYOUTS[layout], *load, *lengths]
        + (_timeline(a) if input_lens else [])
        + ["--out", str(out)]
        # A latency bench, not an SLO verdict: the default 1.5-s TTFT bound would stop a slow layout's
        # level early (requests waiting twice the bound) and leave it without percentiles to compare.
        + ["--slo-ttft", str(LATENCY_BENCH_SLO_TTFT_S)]
    )
    return time.monotonic() - t0


def _predict(run: Path, profile: Path, a, *extra: str) -> dict:
    """`llmdiag plan --predict-sweep` of one run, with --seeds when given (else the command's default)."""
    seeds = [] if a.seeds is None else ["--seeds", str(a.seeds)]
    cmd = ["llmbench.diag_cli", "plan", "--predict-sweep", str(run), "--profile", str(profile), *extra, *seeds]
    return json.loads(_run([*cmd, "--json"]))


def peak_tok_s(closed_levels: list[dict]) -> float:
    """The highest output throughput the closed loop measured (a layout's capacity, as far as it went)."""
    return max(((lv.get("measured") or {}).get("output_tok_s") or 0.0 for lv in closed_levels), default=0.0)


def open_loop_rates(specs: list[str], closed_levels: list[dict], output_len: int) -> list[float]:
    """--rate's entries in req/s: a number as given, "70%" as that share of the highest request rate
    the closed loop measured for this model and layout (output tok/s over the output length), so
    that every layout is offered a load under its own capacity (2 req/s overloads `tiny` at TP2 on
    two cores: no request of the window finishes and the level has no latency to compare)."""
    peak = peak_tok_s(closed_levels)
    rates = []
    for spec in specs:
        if spec.endswith("%"):
            if peak <= 0:
                raise SystemExit(f"--rate {spec}: the closed loop measured no throughput to take a share of")
            rates.append(round(float(spec[:-1]) / 100 * peak / output_len, 2))
        else:
            rates.append(float(spec))
    return rates


def _open_loop(
    model: str, layout: str, a, profile: Path, fitted_profile: Path, work: Path, closed_levels: list[dict]
) -> dict:
    """One open-loop run (Poisson arrivals at --rate, the first input length), predicted by the
    calibrated profile and by the profile fitted to the closed-loop levels: every level held out."""
    run = work / f"run-{model}-{layout}-rate"
    rate = ",".join(map(str, open_loop_rates(a.rate, closed_levels, a.output_len)))
    sweep_s = _sweep(model, layout, a, work, run, ["--request-rate", rate], a.input_lens[:1])
    plain, fitted = _predict(run, profile, a), _predict(run, fitted_profile, a)
    return {
        "sweep_s": round(sweep_s, 1),
        "calibrated": {"levels": plain["levels"], "median_abs_error": medians(plain["levels"], "predicted")},
        "fitted": {"levels": fitted["levels"], "median_abs_error": medians(fitted["levels"], "predicted")},
    }


def _trace(model: str, layout: str, a, profile: Path, fitted_profile: Path, work: Path, closed_levels: list[dict]):
    """One replay of a bursty trace (bench/plan_trace.py, the same seed for every case) at --trace-share
    of the layout's closed-loop peak request rate, played once; every level held out."""
    run = work / f"run-{model}-{layout}-trace"
    path = work / f"trace-{model}-{layout}.jsonl"
    if not a.from_runs:
        rate = float(a.trace_share.rstrip("%")) / 100 * peak_tok_s(closed_levels) / mean_output_len()
        write_bursty_trace(path, rate, a.trace_span, seed=28)
    load = ["--workload", "trace", "--dataset", str(path), "--block-size", str(BLOCK), "--prompt-format", "ids"]
    sweep_s = _sweep(model, layout, a, work, run, load, [])
    plain, fitted = _predict(run, profile, a), _predict(run, fitted_profile, a)
    return {
        "sweep_s": round(sweep_s, 1),
        "calibrated": {"levels": plain["levels"], "median_abs_error": medians(plain["levels"], "predicted")},
        "fitted": {"levels": fitted["levels"], "median_abs_error": medians(fitted["levels"], "predicted")},
    }


def _model_case(model: str, layout: str, a, profile: Path, work: Path, fit_every_length: bool = False) -> dict:
    """`fit_every_length`: fit to the first input length's lowest and highest concurrency and to each
    other input length's lowest (its fitted profile saved apart), else to the first length's alone."""
    run = work / f"run-{model}-{layout}"
    sweep_s = _sweep(model, layout, a, work, run, ["--concurrency", ",".join(map(str, a.concurrency))], a.input_lens)
    plain = _predict(run, profile, a)
    levels = [lv["level_id"] for lv in plain["levels"]]
    more = tuple(a.input_lens[1:]) if fit_every_length else ()
    fit_levels = _fit_levels(levels, a.concurrency, a.input_lens[0], a.output_len, more)
    fitted_profile = work / f"fitted-{model}-{layout}{'-every-length' if fit_every_length else ''}.json"
    fitted = _predict(run, profile, a, "--fit", ",".join(fit_levels), "--save-profile", str(fitted_profile))
    return {
        "model": model,
        "layout": layout,
        "sweep_s": round(sweep_s, 1),
        "fit_levels": fit_levels,
        "calibrated": {"levels": plain["levels"], "median_abs_error": medians(plain["levels"], "predicted")},
        "fitted": {
            "levels": fitted["levels"],
            "profile": fitted["profile"],
            "median_abs_error": {
                "fitted": medians(fitted["levels"], "fitted"),
                "held_out": medians(fitted["levels"], "predicted"),
            },
        },
        "open_loop": _open_loop(model, layout, a, profile, fitted_profile, work, plain["levels"]) if a.rate else None,
        "trace": _trace(model, layout, a, profile, fitted_profile, work, plain["levels"]) if a.trace_share else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--models",
        default="tiny-test,tiny,random",
        help="built-in models, and 'random': a random Llama checkpoint of other shapes",
    )
    p.add_argument("--concurrency", default="1,4,8,16")
    p.add_argument("--input-lens", default="128,512")
    p.add_argument("--layouts", default="tp1", help="comma list of tp1, tp2, pp2 (gloo ranks on this CPU)")
    p.add_argument(
        "--rate",
        default="",
        help="open-loop rates (req/s, or '70%%': that share of the layout's highest closed-loop request rate; "
        "comma list): one more run per model and layout, held out",
    )
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="a fixed warm-up; default: the sweep's sized one (at least 5 s and until every user has finished a request)",
    )
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--max-duration", type=float, default=60.0, help="the bound of a sized warm-up")
    p.add_argument(
        "--trace-share",
        default="",
        help="one more run per model and layout: a bursty trace (bench/plan_trace.py) at this share of the "
        "layout's closed-loop peak request rate, e.g. '50%%', played once; held out",
    )
    p.add_argument("--trace-span", type=float, default=20.0, help="the trace's length in seconds")
    p.add_argument("--profile", default=None, help="a profile file; default: calibrate this machine first")
    p.add_argument(
        "--no-serve",
        dest="serve",
        action="store_false",
        help="calibrate without --serve: the 'calibrated' rows then miss what the HTTP server adds to every step",
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=None,
        help="simulations pooled per predicted level (llmdiag plan --seeds; default: its own default)",
    )
    p.add_argument(
        "--fit-every-length",
        action="store_true",
        help="fit also to the lowest concurrency of each other input length (bench/plan_fit_lengths.py)",
    )
    p.add_argument("--quick", action="store_true", help="tiny-test, concurrency 1, 4, 8, one input length")
    p.add_argument("--out", default=str(ROOT / "bench" / "plan_accuracy.json"))
    p.add_argument(
        "--from-runs",
        default=None,
        help="predict the runs a --keep-runs invocation kept in this folder again, with its profile, "
        "measuring nothing (same --models, --layouts, --concurrency, --input-lens and --rate)",
    )
    p.add_argument(
        "--keep-runs",
        default=None,
        help="keep the profile, the sweeps' run directories and the fitted profiles in this folder "
        "(to predict them again after a change to the model without measuring again)",
    )
    a = p.parse_args()
    if a.quick:
        a.models, a.concurrency, a.input_lens, a.duration = "tiny-test", "1,4,8", "128", 6.0
    a.concurrency = [int(x) for x in str(a.concurrency).split(",")]
    a.input_lens = [int(x) for x in str(a.input_lens).split(",")]
    a.rate = [x.strip() for x in str(a.rate).split(",") if x.strip()]
    a.layouts = [x.strip() for x in str(a.layouts).split(",") if x.strip()]
    unknown = [x for x in a.layouts if x not in LAYOUTS]
    if unknown:
        raise SystemExit(f"--layouts: unknown {unknown}; known: {', '.join(LAYOUTS)}")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="plan-accuracy-") as tmp:
        work = Path(a.from_runs or a.keep_runs or tmp)
        work.mkdir(parents=True, exist_ok=True)
        profile = Path(a.profile) if a.profile else work / "profile.json"
        if not a.profile and not a.from_runs:
            _run(
                ["llmbench.diag_cli", "calibrate", "--out", str(profile)]
                + (["--quick"] if a.quick else [])
                + (["--serve"] if a.serve else [])
            )
        profile_doc = json.loads(profile.read_text())
        cases = [
            _model_case(m, lay, a, profile, work, a.fit_every_length) for m in a.models.split(",") for lay in a.layouts
        ]
    print_levels(cases)
    held = [c["fitted"]["median_abs_error"]["held_out"] for c in cases]
    summary = {}
    for k in ("output_tok_s", "tpot_p50_s"):
        values = [h[k] for h in held if h.get(k) is not None]
        worst = max(values) if values else None
        summary[k] = {
            "held_out_median_abs_error_worst_model": worst,
            "goal": GOAL,
            "verdict": verdict(worst, GOAL, higher_is_better=False) if worst is not None else "n/a",
        }
        print(
            f"{k}: held-out median |error| (worst model) "
            f"{'-' if worst is None else f'{worst:.1%}'} vs goal {GOAL:.0%}: {summary[k]['verdict']}"
        )
    ranking = rank_layouts(cases)
    print_ranking(ranking)
    held_out_pooled = pooled(cases)
    for k, v in held_out_pooled.items():
        if v["median"] is not None:
            print(f"{k}: held-out |error| over {v['n']} levels, median {v['median']:.1%}, P90 {v['p90']:.1%}")
    write_json(
        a.out,
        {
            "bench": "plan_accuracy",
            "args": {k: v for k, v in vars(a).items()},
            "machine": machine(),
            "wall_s": round(time.monotonic() - t0, 1),
            "profile": {k: profile_doc.get(k) for k in ("name", "source", "step_overhead", "assumptions")},
            "cases": cases,
            "summary": summary,
            "held_out_pooled": held_out_pooled,
            "ranking": ranking,
        },
    )


if __name__ == "__main__":
    main()
