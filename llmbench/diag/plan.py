"""`llmdiag plan`: rank parallel plans (TP, PP, EP, quantization) for a model on a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.text import Text

from llmbench.cli_common import make_console, user_errors
from llmbench.options.profile import POOLED_SEEDS
from refengine.server.dp_policy import DEFAULT_LB_POLICY
from reports.grid import Column, Grid, print_grid
from rundir.run_info import DEFAULT_TPOT_P95_S, DEFAULT_TTFT_P99_S

console = make_console()
MAX_REPLICAS = 64  # --peak-rate's bound: least-outstanding simulates every replica together, so cost grows with it


def plan(
    model: Optional[str] = typer.Option(
        None,
        "--model",
        "-m",
        help="A preset (llama-3-8b, llama-3-70b, qwen2-7b, qwen2-72b, "
        "mixtral-8x7b), a refengine model (tiny, tiny-test) or a path to a config.json.",
    ),
    nodes: int = typer.Option(1, "--nodes", help="Nodes in the cluster."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs in each node."),
    gpu_memory: float = typer.Option(80.0, "--gpu-memory", help="Memory per GPU in GiB."),
    intra_bw: float = typer.Option(
        450.0, "--intra-bw", help="Intra-node bandwidth per GPU in GB/s (NVLink 4: 450; PCIe 5 x16: ~55)."
    ),
    inter_bw: float = typer.Option(50.0, "--inter-bw", help="Inter-node bandwidth per GPU in GB/s (400 Gb/s NIC: 50)."),
    dtype: str = typer.Option("bf16", "--dtype", help="Weight dtype: fp32, fp16, bf16, fp8, int8, int4."),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="KV cache dtype: auto (16-bit), fp8, int8, int4."),
    max_model_len: int = typer.Option(4096, "--max-model-len", help="Longest prompt + output per request."),
    concurrency: int = typer.Option(
        32, "--concurrency", "-c", help="Concurrent requests the whole cluster must hold (with 20% headroom)."
    ),
    request_tokens: Optional[int] = typer.Option(
        None, "--request-tokens", help="Typical prompt + output tokens (default: max_model_len)."
    ),
    gpu_memory_utilization: float = typer.Option(
        0.90, "--gpu-memory-utilization", help="Fraction of GPU memory the engine may use."
    ),
    max_num_batched_tokens: int = typer.Option(
        2048, "--max-num-batched-tokens", help="Tokens per step: sizes activations and each all-reduce."
    ),
    micro_batches: int = typer.Option(
        16, "--micro-batches", help="Pipeline micro-batches (capped by the requests that fit)."
    ),
    no_quantize: bool = typer.Option(False, "--no-quantize", help="Do not consider fp8 weights."),
    top: int = typer.Option(12, "--top", help="Rows of the ranked table to print."),
    predict_sweep: Optional[Path] = typer.Option(
        None,
        "--predict-sweep",
        help="A run directory: predict its levels "
        "from its own spec and engine flags, beside what it measured "
        "(docs/planning.md). Needs --profile.",
    ),
    profile: Optional[str] = typer.Option(
        None,
        "--profile",
        help="The machine's costs: a file from `llmdiag "
        "calibrate --out FILE`, or a published GPU (h100, h200, a100, mi300x).",
    ),
    fit: Optional[str] = typer.Option(
        None,
        "--fit",
        help="With --predict-sweep: level ids (comma-separated) or "
        "'all' to fit the profile's efficiency factors to (operator scale, step and "
        "request overheads); the other levels are held-out predictions.",
    ),
    what_if: Optional[list[str]] = typer.Option(
        None,
        "--what-if",
        help="Engine arguments changed for the "
        "prediction, e.g. max_num_seqs=64,enable_chunked_prefill=false; "
        "repeat it to compare several variations (ranking only).",
    ),
    input_len: int = typer.Option(512, "--input-len", help="With --profile: prompt tokens of the target load."),
    output_len: int = typer.Option(128, "--output-len", help="With --profile: output tokens of the target load."),
    rate: Optional[float] = typer.Option(
        None, "--rate", help="With --profile: the target load as requests/s (Poisson) instead of --concurrency users."
    ),
    peak_rate: Optional[float] = typer.Option(
        None,
        "--peak-rate",
        help="With --profile: also size the top plans as "
        "fleets for this many requests/s (the seed's peak: 350): the fewest "
        "replicas within the SLO under each balancing policy, and the GPUs.",
    ),
    lb_policy: str = typer.Option(
        DEFAULT_LB_POLICY,
        "--lb-policy",
        help="With --peak-rate: the fleet front's "
        "balancing policy, round-robin or least-outstanding (the other is sized beside "
        "it, for what the policy costs).",
    ),
    max_replicas: int = typer.Option(
        MAX_REPLICAS,
        "--max-replicas",
        help="With --peak-rate: the most replicas the sizing tries (least-outstanding simulates them all together).",
    ),
    slo_ttft: float = typer.Option(DEFAULT_TTFT_P99_S, "--slo-ttft", help="With --profile: TTFT P99 bound in seconds."),
    slo_tpot: float = typer.Option(DEFAULT_TPOT_P95_S, "--slo-tpot", help="With --profile: TPOT P95 bound in seconds."),
    extra_concurrency: Optional[str] = typer.Option(
        None,
        "--extra-concurrency",
        help="With --predict-sweep: "
        "also predict levels the run did not measure, at these "
        "concurrencies (comma-separated), with its lengths.",
    ),
    save_profile: Optional[Path] = typer.Option(
        None, "--save-profile", help="With --fit: write the fitted profile here (use it as --profile next time)."
    ),
    steady_steps: bool = typer.Option(
        False,
        "--steady-steps",
        help="With --fit: simulate every step at the model's time, without the step-time jitter measured "
        "from the run's fitted concurrency-1 level (docs/planning.md, 'Step-time jitter').",
    ),
    seeds: int = typer.Option(
        POOLED_SEEDS,
        "--seeds",
        min=1,
        help="With --predict-sweep: simulate each level with this many seeds (the request overheads' and "
        "step jitter's draws, which decide how a closed loop's users fall into phase) and pool their "
        "requests (docs/planning.md, 'Seeds').",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the prediction as JSON (with --predict-sweep)."),
) -> None:
    """Rank parallel plans for a model on a cluster: the seed's procedure (one card, TP in a node, PP across
    nodes, EP for MoE), memory and KV capacity per plan, all-reduce bytes and time, pipeline bubble."""
    from analyzers.diagnosis_error import DiagnosisError
    from analyzers.model.memory import GiB, MiB, ServingPlan
    from analyzers.model.presets import resolve_model
    from analyzers.plan.parallel import Cluster, decision_steps, rank_plans

    if predict_sweep is not None:
        from llmbench.diag.plan_predict import emit, predict_run
        from llmbench.options.parse import parse_list

        extra = parse_list(extra_concurrency, int, "--extra-concurrency") or None
        with user_errors():
            if profile is None:
                raise DiagnosisError("--predict-sweep needs --profile (a file from llmdiag calibrate, or h100, ...)")
            if what_if and len(what_if) > 1:
                raise DiagnosisError("--predict-sweep takes one --what-if (it predicts the run under it)")
            result = predict_run(
                predict_sweep,
                profile,
                fit,
                what_if[0] if what_if else None,
                extra,
                step_jitter=not steady_steps,
                seeds=seeds,
            )
        emit(result, as_json, console, save_profile)
        return
    with user_errors():
        if model is None:
            raise DiagnosisError("give --model (or --predict-sweep RUN)")
        shape = resolve_model(model)
        cluster = Cluster(
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            gpu_memory_gib=gpu_memory,
            intra_node_gbps=intra_bw,
            inter_node_gbps=inter_bw,
        )
        base = ServingPlan(
            weight_dtype=dtype,
            kv_dtype=kv_dtype,
            max_model_len=max_model_len,
            concurrency=concurrency,
            request_tokens=request_tokens,
            gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=max_num_batched_tokens,
        )
        ranked = rank_plans(shape, cluster, base, micro_batches=micro_batches, quantize=not no_quantize)
        if not ranked:
            raise DiagnosisError(
                f"{shape.name} fits no TP x PP plan on {cluster.gpus} GPUs of {gpu_memory:g} GiB "
                "(even quantized); add GPUs or nodes"
            )
    console.print(
        Text(
            f"{shape.name}: {shape.num_parameters() / 1e9:.2f}B parameters on {nodes} x {gpus_per_node} "
            f"GPUs of {gpu_memory:g} GiB ({intra_bw:g} GB/s in a node, {inter_bw:g} GB/s across); target "
            f"{concurrency} requests of {base.tokens_per_request:,} tokens",
            style="bold",
        )
    )
    for step in decision_steps(shape, cluster, ranked, dtype):
        console.print(Text(step))
    table = Grid(
        "candidate plans, best first",
        [
            Column(
                col,
                "left" if col in ("plan", "notes") else "right",
                wrap=col in ("plan", "all-reduce (2 per layer)", "notes"),
            )
            for col in (
                "#",
                "plan",
                "GPUs x replicas",
                "weights GiB/GPU",
                "KV tokens/replica",
                "max conc/replica",
                "safe total",
                "all-reduce (2 per layer)",
                "comm ms/step",
                "bubble",
                "notes",
            )
        ],
        box_optional=True,
    )
    for i, c in enumerate(ranked[:top], 1):
        notes = []
        if not c.meets_target:
            notes.append("below target")
        if c.tp_crosses_nodes:
            notes.append("TP crosses nodes")
        table.add_row(
            str(i),
            f"{c.label} {c.weight_dtype}",
            f"{c.gpus_per_replica} x {c.replicas}",
            f"{c.estimate.weights / GiB:.1f}",
            f"{c.estimate.kv_tokens:,}",
            str(c.estimate.max_concurrency()),
            str(c.safe_total),
            f"{c.allreduce_bytes / MiB:.0f} MiB, {c.allreduce_s * 1e3:.2f} ms" if c.tp > 1 else "-",
            f"{c.comm_s_per_step * 1e3:.1f}",
            f"{c.bubble:.0%}" if c.pp > 1 else "-",
            ", ".join(notes),
        )
    print_grid(console, table)
    console.print(
        "[dim]all-reduce: tokens x hidden x dtype, two per layer, ring time 2(n-1)/n x bytes / bandwidth; "
        "bubble (PP-1)/(PP+MB-1); KV and memory from the `llmdiag oom` model (see docs/diagnosis.md). "
        "Ranked on memory and communication only"
        + (
            ": the predicted ranking follows."
            if profile
            else ": give --profile (llmdiag calibrate, or h100, ...) to predict TTFT, TPOT and goodput; sweep "
            "the top plans (llmbench sweep) before choosing."
        )
        + "[/]"
    )
    if profile is not None:
        from analyzers.plan.rank import TargetLoad
        from llmbench.diag.plan_fleet import sizing_spec
        from llmbench.diag.plan_rank import predicted_ranking, print_ranking

        with user_errors():
            load = TargetLoad(input_len, output_len, concurrency=None if rate else concurrency, request_rate=rate)
            spec = sizing_spec(peak_rate, lb_policy, slo_ttft, slo_tpot, max_replicas)
            ranked_p = predicted_ranking(
                shape, cluster, ranked[:top], profile, load, slo_ttft, slo_tpot, max_num_batched_tokens, what_if or []
            )
        print_ranking(ranked_p, load, slo_ttft, slo_tpot, profile, console)
        if spec is not None:
            from llmbench.diag.plan_fleet import print_fleet, size_top_plans

            with user_errors():
                sized = size_top_plans(
                    shape, cluster, ranked_p, profile, load, spec, max_num_batched_tokens, lb_policy, console
                )
            print_fleet(sized, load, spec, cluster, console)
