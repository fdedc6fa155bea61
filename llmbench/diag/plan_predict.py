"""`llmdiag plan --predict-sweep RUN`: the run's levels predicted from its own spec, beside its measurements."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from rich.console import Console

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.presets import resolve_model
from analyzers.plan.engine_config import engine_args_from_flags, parse_what_if, resolve_engine, with_changes
from analyzers.plan.gpu_profiles import resolve_profile
from analyzers.plan.measured import measured_levels
from analyzers.plan.outside_server import outside_the_server
from analyzers.plan.predict import METRICS
from analyzers.plan.step_jitter import jitter_of_level
from analyzers.plan.sweep_prediction import SweepPrediction, predict_sweep
from llmbench.diag.plan_levels import planned_levels
from llmbench.options.profile import POOLED_SEEDS
from reports.grid import Column, Grid, print_grid
from rundir import RunDir


def _read_run(path: Path):
    run = RunDir(path)
    if not run.run_json.exists():
        raise DiagnosisError(f"{path} is not a run directory (no run.json)")
    try:
        return run, run.read_info()
    except (OSError, ValueError, TypeError) as exc:
        raise DiagnosisError(f"cannot read {run.run_json}: {exc}") from None


KV_SIZING = {
    "kv_cache_memory_bytes",
    "num_gpu_blocks_override",
    "block_size",
    "kv_cache_dtype",
    "dtype",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "pipeline_layer_partition",
    "quantization",
}


def _recorded_blocks(facts: dict) -> int | None:
    value = (facts.get("cache_config") or {}).get("num_gpu_blocks")
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def predict_run(
    path: Path,
    profile_arg: str,
    fit: str | None,
    what_if: str | None,
    extra_concurrency: list[int] | None = None,
    fit_scale: bool = True,
    step_jitter: bool = True,
    seeds: int = POOLED_SEEDS,
) -> SweepPrediction:
    """The run's levels (and, with `extra_concurrency`, levels it did not run at those concurrencies,
    the same lengths and timeline), predicted; fitted first to the `fit` levels. `step_jitter`: with
    a fit, simulate the step-time wander of the run's fitted concurrency-1 level (if it has one)."""
    run, info = _read_run(path)
    if not info.target.model:
        raise DiagnosisError(f"run {info.run_id} does not say its model; --predict-sweep needs one")
    shape = resolve_model(info.target.model)
    profile = resolve_profile(profile_arg)
    args = engine_args_from_flags(info.target.model, list(info.target.engine_args))
    changes = parse_what_if(what_if) if what_if else {}
    args = with_changes(args, changes) if changes else args
    # The server's own block count holds unless the variation changes what a block costs or the budget.
    blocks = None if KV_SIZING & set(changes) else _recorded_blocks(info.target.engine_facts)
    setup = resolve_engine(args, shape, profile.dtype_bytes, profile.device_type, blocks)
    if info.target.kind != "embedded":
        setup = dataclasses.replace(
            setup,
            notes=(
                *setup.notes,
                "an external engine, simulated with refengine's "
                "scheduler and default engine arguments (its own are not recorded)",
            ),
        )
    levels = planned_levels(info.sweep)
    if extra_concurrency:
        if not info.sweep.concurrency:
            raise DiagnosisError("--extra-concurrency needs a closed-loop run (this one ran request rates)")
        known = {lv.load.level_id for lv in levels}
        levels += [
            lv
            for lv in planned_levels(info.sweep, {"concurrency": sorted(set(extra_concurrency))})
            if lv.load.level_id not in known
        ]
    measured = measured_levels(run)
    fit_levels = None
    if fit:
        fit_levels = (
            [lv.load.level_id for lv in levels if lv.load.level_id in measured]
            if fit == "all"
            else [x.strip() for x in fit.split(",") if x.strip()]
        )
    # The request overhead is measured where the server's own TTFT histogram lets it be.
    outside = outside_the_server(run) if fit_levels else {}
    # A served step's wander, from a fitted level where each gap is one request's step (concurrency 1).
    alone = [lv.load.level_id for lv in levels if lv.load.level_id in (fit_levels or []) and lv.load.concurrency == 1]
    jitter = jitter_of_level(run, alone[0]) if alone and step_jitter else None
    return predict_sweep(
        info.run_id, shape, profile, setup, levels, measured, fit_levels, fit_scale, outside, jitter, seeds
    )


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.1f}"


def _cell(pred: dict, meas: dict | None, err: dict | None, key: str) -> str:
    fmt = (lambda v: "-" if v is None else f"{v:.0f}") if key == "output_tok_s" else _ms
    out = fmt(pred.get(key))
    if meas is not None:
        out += f" / {fmt(meas.get(key))}"
        if err and err.get(key) is not None:
            out += f" ({err[key]:+.0%})"
    return out


def print_prediction(result: SweepPrediction, console: Console) -> None:
    d = result.to_dict()
    console.print(
        f"[bold]{result.run_id}[/]: {result.model}, profile {result.profile.name} ({result.profile.source}); "
        f"TP{result.setup.tp} PP{result.setup.pp}, max_num_seqs {result.setup.scheduler.max_num_seqs}, "
        f"{result.setup.cache.num_blocks} KV blocks"
    )
    table = Grid(
        "predicted / measured (error); ms, output tok/s",
        [Column("level", wrap=False), Column("role")]
        + [Column(k.replace("_s", "").replace("_", " "), "right", wrap=True) for k in METRICS],
        box_optional=True,
    )
    for row in d["levels"]:
        table.add_row(
            row["level_id"], row["role"], *(_cell(row["predicted"], row["measured"], row["error"], k) for k in METRICS)
        )
    print_grid(console, table)
    for role, errs in d["median_abs_error"].items():
        parts = ", ".join(f"{k} {v:.0%}" for k, v in errs.items() if v is not None)
        console.print(f"median |error| of the {role} levels: {parts or 'nothing measured'}")
    if result.fit is not None:
        p, ov = result.profile, result.profile.step_overhead
        console.print(
            f"fitted to {', '.join(result.fit.fitted_levels)}: operators x {p.compute_scale:.2f}, step overhead "
            f"{ov.fixed_s * 1e3:.2f} ms + {ov.per_unit_s * 1e6:.0f} us/request, "
            f"{p.contended_share:.0%} of the operators at fewer threads, {p.request_overhead.describe()} "
            f"({result.fit.request_overhead_from})",
            highlight=False,
        )
        jitter = result.profile.step_jitter
        console.print(
            jitter.describe() + " (--steady-steps: without it)"
            if jitter
            else "steady steps: no step-time jitter (no fitted concurrency-1 level, or --steady-steps)",
            highlight=False,
        )
    if d["fit"] is not None and d["fit"]["warning"]:
        console.print(f"[bold yellow]warning:[/] {d['fit']['warning']}")
    if any(row["role"] == "not run" for row in d["levels"]):
        console.print("levels marked 'not run' are predictions of loads the run did not measure")
    for note in sorted(set(result.setup.notes)):
        console.print(f"[dim]note: {note}[/]")
    levels_of: dict[str, list[str]] = {}  # a note once, with the levels it is about
    for row in d["levels"]:
        for note in row["predicted"]["notes"]:
            levels_of.setdefault(note, []).append(row["level_id"])
    for note, level_ids in levels_of.items():
        console.print(f"[dim]note ({', '.join(level_ids)}): {note}[/]", highlight=False)


def emit(result: SweepPrediction, as_json: bool, console: Console, save_profile: Path | None) -> None:
    if save_profile is not None:
        result.profile.save(save_profile)
    if as_json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        print_prediction(result, console)
