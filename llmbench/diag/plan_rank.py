"""`llmdiag plan --model M --profile P`: the candidate plans ranked on predicted goodput at the target load,
with any --what-if variations of the engine beside the baseline."""

from __future__ import annotations

from rich.console import Console

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.presets import ModelShape
from analyzers.plan.engine_config import parse_what_if, with_changes
from analyzers.plan.gpu_profiles import resolve_profile
from analyzers.plan.parallel import Candidate, Cluster
from analyzers.plan.rank import RankedPlan, TargetLoad, rank_by_goodput
from analyzers.stats.distribution import MIN_SAMPLES_FOR_P99
from refengine.config import EngineArgs
from refengine.errors import RefEngineError
from reports.grid import Column, Grid, print_grid


def predicted_ranking(
    shape: ModelShape,
    cluster: Cluster,
    candidates: list[Candidate],
    profile_arg: str,
    load: TargetLoad,
    slo_ttft_s: float,
    slo_tpot_s: float,
    max_num_batched_tokens: int,
    what_ifs: list[str],
) -> list[RankedPlan]:
    profile = resolve_profile(profile_arg)
    try:
        base = EngineArgs(model=shape.name, max_num_batched_tokens=max_num_batched_tokens)
    except RefEngineError as exc:
        raise DiagnosisError(str(exc)) from None
    variations = [("", base)] + [(w, with_changes(base, parse_what_if(w))) for w in what_ifs]
    max_len = candidates[0].estimate.plan.max_model_len if candidates else shape.max_position_embeddings
    for label, args in variations:  # every variation checked before any simulation runs
        try:
            args.scheduler_config(max_len)
        except RefEngineError as exc:
            raise DiagnosisError(f"--what-if {label}: {exc}" if label else str(exc)) from None
    out: list[RankedPlan] = []
    for label, args in variations:
        out += rank_by_goodput(shape, cluster, candidates, profile, args, load, slo_ttft_s, slo_tpot_s, label)
    return sorted(out, key=lambda p: -p.goodput_req_s)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.0f}"


def print_ranking(
    ranked: list[RankedPlan], load: TargetLoad, slo_ttft_s: float, slo_tpot_s: float, profile_arg: str, console: Console
) -> None:
    what = (
        f"{load.concurrency} concurrent requests"
        if load.concurrency is not None
        else f"{load.request_rate:g} requests/s"
    )
    columns = [
        "#",
        "plan",
        "what-if",
        "goodput req/s",
        "output tok/s",
        "TTFT P50/P99 ms",
        "TPOT P50/P95 ms",
        "SLO",
        "preempt",
    ]
    table = Grid(
        f"predicted at {what} of {load.input_len}/{load.output_len} tokens ({profile_arg}); "
        f"SLO TTFT P99 <= {slo_ttft_s * 1e3:g} ms, TPOT P95 <= {slo_tpot_s * 1e3:g} ms",
        [
            Column(col, "left" if col in ("plan", "what-if", "SLO") else "right", wrap=col in ("plan", "what-if"))
            for col in columns
        ],
        box_optional=True,
    )
    for i, r in enumerate(ranked, 1):
        p = r.prediction
        table.add_row(
            str(i),
            f"{r.candidate.label} {r.candidate.weight_dtype}",
            r.variation or "-",
            f"{r.goodput_req_s:.2f}",
            f"{r.output_tok_s:,.0f}",
            f"{_ms(p.ttft_p50_s)}/{_ms(p.ttft_p99_s)}",
            f"{_ms(p.tpot_p50_s)}/{_ms(p.tpot_p95_s)}",
            "met" if r.slo_met else "missed",
            str(p.preemptions),
        )
    print_grid(console, table)
    notes = sorted({n for r in ranked for n in r.prediction.notes if "simulated requests" not in n})
    thin = sum(1 for r in ranked if r.prediction.n_requests < MIN_SAMPLES_FOR_P99)
    if thin:
        notes.append(
            f"{thin} of {len(ranked)} predictions rest on fewer than {MIN_SAMPLES_FOR_P99} simulated requests "
            "(their window reached its bound): their P99 is rough"
        )
    for note in notes:
        console.print(f"[dim]note: {note}[/]")
    console.print(
        "[dim]each replica simulated with refengine's scheduler at its share of the load; step times "
        "from the profile's per-operator model (docs/planning.md). A prediction, not a measurement: "
        "sweep the top plans before choosing.[/]"
    )
