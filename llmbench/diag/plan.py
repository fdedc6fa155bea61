"""`llmdiag plan`: rank parallel plans (TP, PP, EP, quantization) for a model on a cluster."""

from __future__ import annotations

from typing import Optional

import typer
from rich.text import Text

from llmbench.cli_common import make_console, user_errors
from reports.grid import Column, Grid, print_grid

console = make_console()


def plan(
    model: str = typer.Option(..., "--model", "-m", help="A preset (llama-3-8b, llama-3-70b, qwen2-7b, qwen2-72b, "
                              "mixtral-8x7b), a refengine model (tiny, tiny-test) or a path to a config.json."),
    nodes: int = typer.Option(1, "--nodes", help="Nodes in the cluster."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="GPUs in each node."),
    gpu_memory: float = typer.Option(80.0, "--gpu-memory", help="Memory per GPU in GiB."),
    intra_bw: float = typer.Option(450.0, "--intra-bw", help="Intra-node bandwidth per GPU in GB/s (NVLink 4: 450; "
                                   "PCIe 5 x16: ~55)."),
    inter_bw: float = typer.Option(50.0, "--inter-bw", help="Inter-node bandwidth per GPU in GB/s (400 Gb/s NIC: 50)."),
    dtype: str = typer.Option("bf16", "--dtype", help="Weight dtype: fp32, fp16, bf16, fp8, int8, int4."),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="KV cache dtype: auto (16-bit), fp8, int8, int4."),
    max_model_len: int = typer.Option(4096, "--max-model-len", help="Longest prompt + output per request."),
    concurrency: int = typer.Option(32, "--concurrency", "-c", help="Concurrent requests the whole cluster must "
                                    "hold (with 20% headroom)."),
    request_tokens: Optional[int] = typer.Option(None, "--request-tokens", help="Typical prompt + output tokens "
                                                 "(default: max_model_len)."),
    gpu_memory_utilization: float = typer.Option(0.90, "--gpu-memory-utilization", help="Fraction of GPU memory "
                                                 "the engine may use."),
    max_num_batched_tokens: int = typer.Option(2048, "--max-num-batched-tokens", help="Tokens per step: sizes "
                                               "activations and each all-reduce."),
    micro_batches: int = typer.Option(16, "--micro-batches", help="Pipeline micro-batches (capped by the "
                                      "requests that fit)."),
    no_quantize: bool = typer.Option(False, "--no-quantize", help="Do not consider fp8 weights."),
    top: int = typer.Option(12, "--top", help="Rows of the ranked table to print."),
) -> None:
    """Rank parallel plans for a model on a cluster: the seed's procedure (one card, TP in a node, PP across
    nodes, EP for MoE), memory and KV capacity per plan, all-reduce bytes and time, pipeline bubble."""
    from analyzers.diagnosis_error import DiagnosisError
    from analyzers.model.memory import GiB, MiB, ServingPlan
    from analyzers.model.presets import resolve_model
    from analyzers.plan.parallel import Cluster, decision_steps, rank_plans

    with user_errors():
        shape = resolve_model(model)
        cluster = Cluster(nodes=nodes, gpus_per_node=gpus_per_node, gpu_memory_gib=gpu_memory,
                          intra_node_gbps=intra_bw, inter_node_gbps=inter_bw)
        base = ServingPlan(weight_dtype=dtype, kv_dtype=kv_dtype, max_model_len=max_model_len,
                           concurrency=concurrency, request_tokens=request_tokens,
                           gpu_memory_utilization=gpu_memory_utilization,
                           max_num_batched_tokens=max_num_batched_tokens)
        ranked = rank_plans(shape, cluster, base, micro_batches=micro_batches, quantize=not no_quantize)
        if not ranked:
            raise DiagnosisError(f"{shape.name} fits no TP x PP plan on {cluster.gpus} GPUs of {gpu_memory:g} GiB "
                                 "(even quantized); add GPUs or nodes")
    console.print(Text(f"{shape.name}: {shape.num_parameters() / 1e9:.2f}B parameters on {nodes} x {gpus_per_node} "
                       f"GPUs of {gpu_memory:g} GiB ({intra_bw:g} GB/s in a node, {inter_bw:g} GB/s across); target "
                       f"{concurrency} requests of {base.tokens_per_request:,} tokens", style="bold"))
    for step in decision_steps(shape, cluster, ranked, dtype):
        console.print(Text(step))
    table = Grid("candidate plans, best first", [
        Column(col, "left" if col in ("plan", "notes") else "right", wrap=col in ("plan", "all-reduce (2 per layer)",
                                                                                "notes"))
        for col in ("#", "plan", "GPUs x replicas", "weights GiB/GPU", "KV tokens/replica", "max conc/replica",
                    "safe total", "all-reduce (2 per layer)", "comm ms/step", "bubble", "notes")], box_optional=True)
    for i, c in enumerate(ranked[:top], 1):
        notes = []
        if not c.meets_target:
            notes.append("below target")
        if c.tp_crosses_nodes:
            notes.append("TP crosses nodes")
        table.add_row(str(i), f"{c.label} {c.weight_dtype}", f"{c.gpus_per_replica} x {c.replicas}",
                      f"{c.estimate.weights / GiB:.1f}", f"{c.estimate.kv_tokens:,}",
                      str(c.estimate.max_concurrency()), str(c.safe_total),
                      f"{c.allreduce_bytes / MiB:.0f} MiB, {c.allreduce_s * 1e3:.2f} ms" if c.tp > 1 else "-",
                      f"{c.comm_s_per_step * 1e3:.1f}", f"{c.bubble:.0%}" if c.pp > 1 else "-", ", ".join(notes))
    print_grid(console, table)
    console.print("[dim]all-reduce: tokens x hidden x dtype, two per layer, ring time 2(n-1)/n x bytes / bandwidth; "
                  "bubble (PP-1)/(PP+MB-1); KV and memory from the `llmdiag oom` model (see docs/diagnosis.md). "
                  "Ranked on memory and communication only: compute latency (TTFT/TPOT) is not modelled, so sweep "
                  "the top plans (llmbench sweep) before choosing.[/]")
