"""`llmdiag oom`: why it ran out of memory — the memory model, OOM log parsing and the KV ramp,
ending with the oom playbook's steps and the fixes in the seed's order."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.text import Text

from llmbench.cli_common import make_console, user_errors
from reports.grid import Column, Grid, print_grid, print_hanging

console = make_console()


def _gib(x: float) -> str:
    return f"{x / 1024**3:,.2f}"


def oom(
    model: Optional[str] = typer.Option(
        None,
        "--model",
        "-m",
        help="A preset (llama-3-8b, llama-3-70b, qwen2-7b, "
        "qwen2-72b, mixtral-8x7b), a refengine model (tiny, tiny-test) or a path to "
        "a Hugging Face config.json (or its directory).",
    ),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel size (GPUs that split each layer)."),
    pp: int = typer.Option(1, "--pp", help="Pipeline-parallel size (stages that split the layers)."),
    dtype: str = typer.Option("bf16", "--dtype", help="Weight dtype: fp32, fp16, bf16, fp8, int8, int4."),
    kv_dtype: str = typer.Option(
        "auto", "--kv-dtype", help="KV cache dtype: auto (16-bit), fp16, bf16, fp8, int8, int4."
    ),
    max_model_len: int = typer.Option(4096, "--max-model-len", help="Longest prompt + output one request may reach."),
    concurrency: int = typer.Option(32, "--concurrency", "-c", help="Concurrent requests the plan must hold."),
    request_tokens: Optional[int] = typer.Option(
        None,
        "--request-tokens",
        help="Prompt + output tokens a typical request reaches (default: max_model_len, the worst case).",
    ),
    gpu_memory: str = typer.Option(
        "80", "--gpu-memory", help="Memory per GPU: GiB (80), or with a unit: 80GiB, 80GB (10^9 bytes), 24576MiB."
    ),
    gpu_memory_utilization: float = typer.Option(
        0.90, "--gpu-memory-utilization", help="Fraction of GPU memory the engine may use (vLLM's flag)."
    ),
    block_size: int = typer.Option(16, "--block-size", help="Tokens per KV block."),
    max_num_batched_tokens: int = typer.Option(
        2048, "--max-num-batched-tokens", help="Token budget per step (sizes the prefill activations)."
    ),
    max_num_seqs: int = typer.Option(256, "--max-num-seqs", help="The engine's cap on running requests."),
    enforce_eager: bool = typer.Option(False, "--enforce-eager", help="No CUDA graphs (their memory is not counted)."),
    kv_layout: str = typer.Option(
        "paged",
        "--kv-layout",
        help="paged, or contiguous (reserve max_model_len per request, like engines without paging).",
    ),
    log: Optional[Path] = typer.Option(
        None, "--log", help="A log with a PyTorch CUDA OOM or vLLM KV-cache error to explain."
    ),
    ramp: bool = typer.Option(
        False,
        "--ramp",
        help="Ramp a live server from concurrency 1 up until errors, preemptions or KV saturation; needs --target.",
    ),
    target: Optional[str] = typer.Option(
        None, "--target", help="Base URL of a vLLM-compatible server for --ramp (loopback or your own test hosts)."
    ),
    ramp_prompt_tokens: int = typer.Option(
        1000,
        "--ramp-prompt-tokens",
        help="Prompt length of each ramp request "
        "(text sized by the server's own count, unique per request; shortened "
        "to fit the server's max_model_len).",
    ),
    ramp_max_tokens: int = typer.Option(8, "--ramp-max-tokens", help="Output tokens per ramp request (ignore_eos)."),
    ramp_levels: str = typer.Option(
        "1,2,4,8,16,32,64,128,256", "--ramp-levels", help="Comma-separated concurrencies to step through."
    ),
    level_seconds: float = typer.Option(5.0, "--level-seconds", help="Seconds at each ramp level."),
    served_model: Optional[str] = typer.Option(
        None, "--served-model", help="Model name to send (default: the one /v1/models lists)."
    ),
    api_key: Optional[str] = typer.Option(None, "--api-key", help="Bearer token for the target."),
    run_dir: Optional[Path] = typer.Option(
        None,
        "--run",
        help="A run directory: say whether and when memory "
        "pressure occurred (KV usage, preemptions, GPU memory, OOM errors).",
    ),
) -> None:
    """Why it ran out of memory: memory per GPU for a model and plan, the verdict and the fixes in the
    seed's order (--model); explain an OOM message (--log); find a live server's real KV capacity (--ramp); say
    when a recorded run hit memory pressure (--run)."""
    from analyzers.diagnosis_error import DiagnosisError
    from playbooks.playbook import PlaybookRun, load_playbook
    from reports.playbook_table import print_playbook

    with user_errors():
        if not (model or log or ramp or run_dir):
            raise DiagnosisError(
                "give --model (memory model), --log FILE (explain an OOM), --ramp --target URL or --run RUN"
            )
        run = PlaybookRun(load_playbook("oom"))
        estimate = findings = result = None
        if model:
            from analyzers.oom.units import parse_gpu_memory

            estimate = _model_mode(
                model,
                dict(
                    tp=tp,
                    pp=pp,
                    weight_dtype=dtype,
                    kv_dtype=kv_dtype,
                    max_model_len=max_model_len,
                    concurrency=concurrency,
                    request_tokens=request_tokens,
                    gpu_memory_gib=parse_gpu_memory(gpu_memory),
                    gpu_memory_utilization=gpu_memory_utilization,
                    block_size=block_size,
                    max_num_batched_tokens=max_num_batched_tokens,
                    max_num_seqs=max_num_seqs,
                    cuda_graphs=not enforce_eager,
                    kv_layout=kv_layout,
                ),
            )
        if log:
            findings = _log_mode(log)
        if ramp:
            if not target:
                raise DiagnosisError("--ramp needs --target URL (a vLLM-compatible server)")
            from llmbench.diag.ramp import ramp_mode

            result = ramp_mode(
                console,
                target,
                ramp_prompt_tokens,
                ramp_max_tokens,
                ramp_levels,
                level_seconds,
                served_model,
                api_key,
                estimate,
            )
        from analyzers.oom.triage import mark_oom_playbook

        mark_oom_playbook(run, estimate, findings, result)
        if run_dir:
            _run_mode(run_dir, run)
        console.print()
        print_playbook(run, console)


def _model_mode(model: str, plan_kwargs: dict):
    from analyzers.model.memory import ASSUMPTIONS, ServingPlan, estimate_memory
    from analyzers.model.presets import resolve_model
    from analyzers.oom.fixes import suggest_fixes, verdict

    shape = resolve_model(model)
    plan = ServingPlan(**plan_kwargs)
    est = estimate_memory(shape, plan)
    moe = f", MoE {shape.num_experts} experts top-{shape.experts_per_token}" if shape.is_moe else ""
    console.print(
        Text(
            f"{shape.name}: {shape.num_parameters() / 1e9:.2f}B parameters{moe}; TP {plan.tp} x PP "
            f"{plan.pp}, weights {plan.weight_dtype}, KV {plan.kv_bytes:g} B/elem, max_model_len "
            f"{plan.max_model_len:,}, {plan.concurrency} concurrent, {plan.gpu_memory_gib:.4g} GiB x "
            f"{plan.gpu_memory_utilization:.2f}",
            style="bold",
        )
    )
    table = Grid(
        "memory per GPU (the fullest GPU of a replica)",
        [Column("part"), Column("GiB", "right"), Column("share", "right")],
    )
    rows = [
        ("weights", est.weights),
        ("activations (peak prefill)", est.activations),
        ("communication buffers", est.comm_buffers),
        ("CUDA context", est.cuda_context),
        ("CUDA graphs", est.cuda_graphs),
        ("fragmentation headroom", est.fragmentation),
        ("KV cache (what is left)", est.kv_budget),
        ("outside gpu_memory_utilization", est.total - est.usable),
    ]
    for name, value in rows:
        table.add_row(name, _gib(value), f"{value / est.total:.0%}")
    table.add_row(Text("total", style="bold"), Text(_gib(est.total), style="bold"), "100%")
    print_grid(console, table)
    tokens = plan.max_model_len if plan.kv_layout == "contiguous" else plan.tokens_per_request
    per_req = est.blocks_per_request(tokens) * est.block_bytes
    _kv_table(shape, plan, est)
    console.print(
        f"per request of {tokens:,} tokens: {est.blocks_per_request(tokens):,} blocks of {plan.block_size} "
        f"= {per_req / 1024**2:,.1f} MiB per GPU; {plan.concurrency} requests need "
        f"{_gib(est.kv_needed)} GiB, the cache has {_gib(max(est.kv_budget, 0))} GiB"
    )
    console.print(
        f"KV blocks: {est.num_blocks:,} ({est.kv_tokens:,} tokens); max concurrency "
        f"{est.num_blocks:,} // {est.blocks_per_request(tokens):,} = {est.max_concurrency()}; with 20% "
        f"headroom: {est.safe_concurrency()}"
    )
    v = verdict(est)
    console.print(
        Text(
            ("verdict: " if v.fits else "verdict: DOES NOT FIT — ") + v.headline,
            style="bold green" if v.fits else "bold red",
        )
    )
    for reason in v.reasons:
        console.print(Text(f"  - {reason}"))
    fixes = Grid(
        "fixes, in the seed's order",
        [Column("#", "right")] + [Column(c) for c in ("fix", "set", "before", "after", "note")],
    )
    for f in suggest_fixes(est):
        fixes.add_row(str(f.step), f.name, f.change, f.before, f.after, f.note)
    print_grid(console, fixes)
    console.print("[dim]assumptions: " + "; ".join(ASSUMPTIONS) + "[/]")
    return est


def _kv_table(shape, plan, est) -> None:
    """The seed's whole-model KV figures beside what one GPU of the plan holds."""
    from analyzers.oom.units import human_bytes, kv_figures

    table = Grid(
        f"KV cache: 2 x {shape.num_layers} layers x {shape.num_kv_heads} KV heads x {shape.head_dim} "
        f"x {plan.kv_bytes:g} B per token",
        [Column("KV"), Column("whole model", "right"), Column(f"per GPU (TP {plan.tp} x PP {plan.pp})", "right")],
    )
    for f in kv_figures(shape, plan, est):
        table.add_row(f.what, human_bytes(f.whole_model_bytes), human_bytes(f.per_gpu_bytes))
    print_grid(console, table)


def _log_mode(path: Path):
    from analyzers.diagnosis_error import DiagnosisError
    from analyzers.oom.log import parse_oom_log

    if not path.is_file():
        raise DiagnosisError(f"--log {str(path)!r} is not a file")
    findings = parse_oom_log(path.read_text(errors="replace"))
    for f in findings:  # each line wrapped between words under its own start (reports/grid.py)
        print_hanging(console, Text(f"{path.name}: {f.wording}", style="bold"))
        print_hanging(console, Text(f.excerpt, style="dim"), indent=2)
        for line in f.explanation:
            print_hanging(console, Text(f"- {line}"), indent=2)
        for line in f.fixes:
            print_hanging(console, Text(f"fix: {line}", style="green"), indent=2)
    return findings


def _run_mode(run_dir: Path, playbook) -> None:
    """Memory pressure in a recorded run; marks oom.ramp with what the run itself showed."""
    from analyzers.oom.run import memory_pressure
    from rundir import RunDir

    mp = memory_pressure(RunDir(run_dir))
    facts = [
        ("KV usage, max", "n/a" if mp.kv_usage_max is None else f"{mp.kv_usage_max:.0%}"),
        ("preemptions", "n/a" if mp.preemptions is None else f"{mp.preemptions:.0f}"),
        ("GPU memory used, max share", "n/a" if mp.gpu_mem_share_max is None else f"{mp.gpu_mem_share_max:.0%}"),
        ("requests failed with an OOM/KV error", str(mp.oom_errors)),
    ]
    print_grid(
        console,
        Grid(
            f"memory pressure in run {mp.run_id}",
            [Column("evidence"), Column("value", "right")],
            [list(kv) for kv in facts],
        ),
    )
    if mp.episodes:
        ep = Grid(
            "episodes (first 20)",
            [
                Column("kind", wrap=False),
                Column("from", "right"),
                Column("seconds", "right"),
                Column("levels"),
                Column("detail"),
            ],
        )
        t0 = mp.episodes[0].window.start
        for e in mp.episodes[:20]:
            ep.add_row(
                e.kind, f"+{e.window.start - t0:.1f} s", f"{e.window.seconds:.1f}", ", ".join(e.levels), e.detail
            )
        print_grid(console, ep)
    console.print(Text(mp.headline, style="bold red" if mp.occurred else "bold green"))
    evidence = mp.headline + (f"; first at level {mp.first_level}" if mp.first_level else "")
    if mp.occurred:
        playbook.failed("oom.ramp", "run: " + evidence)
    elif len(mp.evidence_missing) < 3:  # some probe evidence, and none of it showed pressure
        playbook.passed("oom.ramp", "run: " + evidence)
    else:
        playbook.unchecked("oom.ramp", "run: no server or gpu probe data (llmbench sweep --probes server,gpu)")
