"""`llmdiag plan --profile P --peak-rate R`: the top plans of the predicted ranking sized as fleets for R
requests/s: one replica's capacity, and the fewest replicas that serve R within the SLO under
--lb-policy and under the other policy, with the GPUs that takes and what the policy costs
(analyzers/plan/fleet_sizing.py; docs/planning.md, "A fleet")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.presets import ModelShape
from analyzers.plan.fleet_sizing import FleetSizing, SizingSpec, size_fleet
from analyzers.plan.gpu_profiles import resolve_profile
from analyzers.plan.parallel import Candidate, Cluster
from analyzers.plan.rank import RankedPlan, TargetLoad, replica_simulator
from analyzers.plan.simulate import Simulator, random_prompt
from refengine.config import EngineArgs
from refengine.errors import RefEngineError
from refengine.server.dp_policy import LB_POLICIES
from reports.grid import Column, Grid, print_grid
from reports.replicas_words import POLICY_WORDS, one_replica_words, policy_cost_words

FLEET_PLANS = 3  # plans sized: each is several simulations, least-outstanding's of the whole fleet


@dataclass
class SizedPlan:
    plan: RankedPlan
    sizing: FleetSizing


def sizing_spec(
    peak_rate: float | None, policy: str, slo_ttft_s: float, slo_tpot_s: float, max_replicas: int
) -> SizingSpec | None:
    """--peak-rate's sizing, its options checked before any simulation runs (None: not asked for)."""
    if policy not in LB_POLICIES:
        raise DiagnosisError(f"--lb-policy is one of {', '.join(LB_POLICIES)}, got {policy!r}")
    return None if peak_rate is None else SizingSpec(peak_rate, slo_ttft_s, slo_tpot_s, max_replicas)


def size_top_plans(
    shape: ModelShape,
    cluster: Cluster,
    ranked: list[RankedPlan],
    profile_arg: str,
    load: TargetLoad,
    spec: SizingSpec,
    max_num_batched_tokens: int,
    policy: str,
    console: Console,
) -> list[SizedPlan]:
    profile = resolve_profile(profile_arg)
    try:
        args = EngineArgs(model=shape.name, max_num_batched_tokens=max_num_batched_tokens)
    except RefEngineError as exc:
        raise DiagnosisError(str(exc)) from None
    policies = [policy] + [p for p in LB_POLICIES if p != policy]
    chosen: list[RankedPlan] = []
    for r in ranked:  # the baseline's rows, best first, each plan once
        if not r.variation and all(r.candidate is not x.candidate for x in chosen):
            chosen.append(r)
    out = []
    for r in chosen[:FLEET_PLANS]:
        c = r.candidate
        console.print(f"[dim]sizing {c.label} {c.weight_dtype} for {spec.target_rate:g} req/s ...[/]")
        out.append(
            SizedPlan(
                r,
                size_fleet(
                    _maker(shape, cluster, c, profile, args),
                    lambda i: (random_prompt(load.input_len, 0, i), load.output_len),
                    spec,
                    policies,
                    c.gpus_per_replica,
                ),
            )
        )
    return out


def _maker(shape: ModelShape, cluster: Cluster, c: Candidate, profile, args: EngineArgs) -> Callable[[], Simulator]:
    return lambda: replica_simulator(shape, cluster, c, profile, args)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.0f}"


def print_fleet(sized: list[SizedPlan], load: TargetLoad, spec: SizingSpec, cluster: Cluster, console: Console) -> None:
    if not sized:
        return
    policies = [c.policy for c in sized[0].sizing.counts]
    columns = [Column("plan", wrap=False), Column("1 replica req/s", "right")]
    for p in policies:
        columns += [Column(f"{POLICY_WORDS[p]}: replicas (GPUs)", "right"), Column("TTFT P99/TPOT P95 ms", "right")]
    table = Grid(
        f"replicas for {spec.target_rate:g} requests/s of {load.input_len}/{load.output_len} tokens; "
        f"SLO TTFT P99 <= {spec.slo_ttft_s * 1e3:g} ms, TPOT P95 <= {spec.slo_tpot_s * 1e3:g} ms",
        columns,
        box_optional=True,
    )
    for s in sized:
        row = [
            f"{s.plan.candidate.label} {s.plan.candidate.weight_dtype}",
            "-" if s.sizing.one_replica.rate is None else f"{s.sizing.one_replica.rate:.3g}",
        ]
        for count in s.sizing.counts:
            if count.replicas is None:
                row += [f"> {spec.max_replicas}", "-"]
            else:
                pred = count.at.prediction if count.at is not None else None
                row += [
                    f"{count.replicas} ({s.sizing.gpus(count)})",
                    "-" if pred is None else f"{_ms(pred.ttft_p99_s)}/{_ms(pred.tpot_p95_s)}",
                ]
        table.add_row(*row)
    print_grid(console, table)
    for s in sized:
        label = f"{s.plan.candidate.label} {s.plan.candidate.weight_dtype}"
        console.print(f"{label}: {policy_cost_words(s.sizing)}; {one_replica_words(s.sizing)}.", highlight=False)
        need = s.sizing.gpus(s.sizing.counts[0])
        if need is not None and need > cluster.gpus:
            console.print(f"[dim]  that is more than the {cluster.gpus} GPUs given (--nodes x --gpus-per-node)[/]")
    console.print(
        f"[dim]each count served {spec.target_rate:g} req/s within the SLO and one fewer did not (both "
        f"simulated, {spec.warmup_s:g} s warm-up + {spec.duration_s:g} s window, Poisson arrivals routed by "
        "the front's own balancer); round robin is simulated on "
        f"{spec.round_robin_sample} of its replicas (each gets every N-th arrival: exact in distribution), "
        'least-outstanding on the whole fleet together (docs/planning.md, "A fleet").[/]'
    )
