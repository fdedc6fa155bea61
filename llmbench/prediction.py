"""A run's levels predicted from a machine profile, into its prediction.json (`llmbench sweep --profile`,
`llmbench report RUN --profile`): the planner's own `--predict-sweep` (llmbench/diag/plan_predict.py),
recorded through the run-directory contract (rundir/prediction.py) for the reports to hold against
the measurement (analyzers/plan/departures.py)."""

from __future__ import annotations

import time

from rich.console import Console

from analyzers.plan.gpu_profiles import resolve_profile
from analyzers.plan.profile import MachineProfile
from analyzers.plan.sweep_prediction import SweepPrediction
from llmbench.diag.plan_predict import predict_run
from rundir import RunDir, RunInfo
from rundir.prediction import PredictedLevel, PredictionRecord, ProfileRef


def load_profile(arg: str) -> MachineProfile:
    """The profile a --profile names, read now so that a typo fails before anything runs (DiagnosisError)."""
    return resolve_profile(arg)


def _short(host: str) -> str:
    return host.split(".")[0].lower()


def profile_scope(info: RunInfo, profile: MachineProfile) -> str:
    """Whose machine the profile describes, as far as the run can tell (rundir.prediction.PROFILE_SCOPES)."""
    if info.target.kind != "embedded":
        return "assumed"
    here = str(info.host.get("hostname") or "")
    of_here = profile.source != "published" and bool(profile.host) and _short(profile.host) == _short(here)
    return "this_machine" if of_here else "other_machine"


def record_of(result: SweepPrediction, profile_arg: str, scope: str) -> PredictionRecord:
    p = result.profile
    levels = []
    for row in result.rows:
        pred = row["predicted"]
        levels.append(
            PredictedLevel(
                level_id=row["level_id"],
                ttft_p50_s=pred["ttft_p50_s"],
                ttft_p99_s=pred["ttft_p99_s"],
                tpot_p50_s=pred["tpot_p50_s"],
                tpot_p95_s=pred["tpot_p95_s"],
                output_tok_s=pred["output_tok_s"],
                req_s=pred["req_s"],
                mean_batch=pred["mean_batch"],
                preemptions=pred["preemptions"],
                n_requests=pred["n_requests"],
                notes=list(pred["notes"]),
            )
        )
    engine = result.to_dict()["engine"]
    return PredictionRecord(
        profile=ProfileRef(
            name=p.name,
            source=p.source,
            host=p.host,
            created=p.created,
            path=profile_arg,
            assumptions=list(p.assumptions),
        ),
        scope=scope,
        levels=levels,
        engine={k: v for k, v in engine.items() if k != "notes"},
        notes=list(engine["notes"]),
        created=time.time(),
    )


def predict_into(run: RunDir, profile_arg: str) -> PredictionRecord:
    """Predict every level of the run's sweep from the profile and write prediction.json (DiagnosisError
    when the run cannot be predicted: no model the planner knows, a profile that does not read)."""
    result = predict_run(run.path, profile_arg, None, None)
    record = record_of(result, profile_arg, profile_scope(run.read_info(), result.profile))
    run.write_prediction(record)
    return record


def check_profile_option(arg: str | None) -> None:
    """--profile read before the run directory is created: a typo is a one-line error that leaves nothing."""
    import typer

    from refengine.errors import RefEngineError

    if arg is None:
        return
    try:
        load_profile(arg)
    except RefEngineError as exc:  # DiagnosisError: no such file, not a profile, an unknown GPU
        raise typer.BadParameter(str(exc), param_hint="--profile") from None


def predict_at_end(run: RunDir, profile_arg: str, console: Console) -> None:
    """The sweep's end: predict its levels before the report is written; a run the planner cannot
    predict (a model it does not know) says why in one line and keeps its report."""
    from refengine.errors import RefEngineError

    try:
        record = predict_into(run, profile_arg)
    except RefEngineError as exc:
        console.print(f"[yellow]no prediction from --profile {profile_arg}: {exc}[/]", highlight=False)
        return
    except Exception as exc:  # noqa: BLE001 - a planner bug must not cost the run: everything is on disk
        console.print(
            f"[yellow]no prediction ({type(exc).__name__}: {exc}); retry with `llmbench report "
            f"{run.path} --profile {profile_arg}`[/]",
            highlight=False,
        )
        return
    console.print(
        f"predicted {len(record.levels)} levels from the profile {record.profile.name} ({run.prediction_json.name})",
        highlight=False,
        markup=False,
    )
