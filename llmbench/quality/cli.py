"""`llmbench quality`: run the quantization quality check and print a pass/fail table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from llmbench.cli_common import make_console, user_errors
from reports.grid import Column, Grid, print_grid

console = make_console()


def quality(
    model: str = typer.Option("tiny", help="A built-in preset (tiny, tiny-test) or a Hugging Face model directory."),
    quantization: str = typer.Option(
        "fp8", help="Weight quantization of the model under test: fp8, or none (to check only the KV cache)."
    ),
    fp8_weight_scales: str = typer.Option("channel", help="FP8 weight scales: channel or block (128x128)."),
    kv_cache_dtype: str = typer.Option("auto", help="KV cache of the model under test: auto or fp8."),
    calculate_kv_scales: bool = typer.Option(False, help="Calibrate per-layer FP8 KV scales on built-in prompts."),
    quantization_skip: Optional[str] = typer.Option(
        None, help="Comma-separated modules kept unquantized (e.g. qkv_proj; 'seed' = the seed article's fix)."
    ),
    dataset: Optional[Path] = typer.Option(
        None,
        help="Prompts: one per line (.txt) or JSON lines with 'text'/'prompt' (.jsonl). Default: a built-in set of 12.",
    ),
    max_prompts: int = typer.Option(64, help="Use at most this many prompts."),
    max_prompt_tokens: int = typer.Option(256, help="Truncate prompts to this many tokens."),
    greedy_tokens: int = typer.Option(32, help="Greedy tokens each model generates for the agreement length."),
    max_mean_kl: float = typer.Option(0.02, help="Fail if the mean KL(ref || quant) in nats exceeds this."),
    max_max_kl: float = typer.Option(1.0, help="Fail if any position's KL in nats exceeds this."),
    min_top1_agreement: float = typer.Option(0.85, help="Fail if top-1 agreement falls below this."),
    max_ppl_ratio: float = typer.Option(1.05, help="Fail if quantized / reference perplexity exceeds this."),
    max_relative_kl: float = typer.Option(
        0.1,
        help="Near-uniform reference (random weights): fail if mean KL "
        "exceeds this share of the reference's information.",
    ),
    near_uniform_nats: float = typer.Option(
        1.0,
        help="A reference whose mean KL to uniform is below this many "
        "nats counts as near-uniform (judged by relative KL).",
    ),
    dtype: str = typer.Option(
        "auto", help="Compute dtype of both models: auto (float32 on CPU), float32, bfloat16, float16."
    ),
    device: str = typer.Option("auto", help="auto, cpu or cuda."),
    sabotage_scales: Optional[float] = typer.Option(
        None, help="Multiply every FP8 weight scale by this (e.g. 4) to prove the check fails a broken quantization."
    ),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the result as JSON to this file."),
) -> None:
    """Compare a quantized model with the same model unquantized (KL, top-1, perplexity, greedy agreement);
    exit 1 if a threshold is missed. The seed's rule: no quantization change without this check."""
    from llmbench.quality.run import QualityThresholds, load_prompts, run_quality_check, sabotage_fp8_scales
    from refengine import LLM
    from refengine.errors import RefEngineError

    with user_errors():
        if max_prompts < 1 or greedy_tokens < 1 or max_prompt_tokens < 2:
            raise RefEngineError("--max-prompts and --greedy-tokens must be >= 1, --max-prompt-tokens >= 2")
        prompts = load_prompts(dataset)[:max_prompts]
        quant = None if quantization in ("none", "") else quantization
        if quant is None and kv_cache_dtype == "auto":
            raise RefEngineError("nothing to check: pass --quantization fp8 and/or --kv-cache-dtype fp8")
        common = dict(dtype=dtype, device=device, kv_cache_memory_bytes=64 << 20, enable_prefix_caching=False)
        with console.status(f"loading {model} twice (reference and quantized) ..."):
            ref = LLM(model=model, **common)
            q = LLM(
                model=model,
                quantization=quant,
                fp8_weight_scales=fp8_weight_scales,
                quantization_skip=quantization_skip,
                kv_cache_dtype=kv_cache_dtype,
                calculate_kv_scales=calculate_kv_scales,
                **common,
            )
        engine = q.llm_engine
        console.print(f"[dim]{engine.quant.policy.summary()}[/]", highlight=False)
        console.print(f"[dim]memory: {engine.quant_memory.summary()}[/]", highlight=False)
        if sabotage_scales is not None:
            n = sabotage_fp8_scales(q, sabotage_scales)
            console.print(f"[yellow]sabotage: {n} FP8 weight scales multiplied by {sabotage_scales:g}[/]")
        thresholds = QualityThresholds(
            max_mean_kl, max_max_kl, min_top1_agreement, max_ppl_ratio, max_relative_kl, near_uniform_nats
        )
        with Progress(
            TextColumn("scoring"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task("score", total=len(prompts) + 1)
            result = run_quality_check(
                ref,
                q,
                prompts,
                thresholds,
                greedy_tokens,
                max_prompt_tokens,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
    _print(result)
    if json_out is not None:
        payload = {
            **result.as_dict(),
            "model": model,
            "policy": engine.quant.policy.as_dict(),
            "memory": engine.quant_memory.as_dict(),
            "sabotage_scales": sabotage_scales,
        }
        json_out.write_text(json.dumps(payload, indent=2))
    raise typer.Exit(code=0 if result.passed else 1)


def _print(r) -> None:
    t = r.thresholds
    table = Grid(
        f"quality: {r.num_prompts} prompts, {r.num_positions} positions",
        [Column("metric"), Column("value"), Column("threshold", wrap=False), Column("verdict")],
    )

    def row(name, value, limit, key):
        ok = r.checks.get(key)
        verdict = Text("") if ok is None else Text("pass", style="green") if ok else Text("FAIL", style="bold red")
        table.add_row(name, value, limit, verdict)

    row("mean KL(ref || quant)", f"{r.mean_kl:.3g} nats", f"<= {t.max_mean_kl:g}", "mean_kl")
    row("max KL", f"{r.max_kl:.3g} nats", f"<= {t.max_max_kl:g}", "max_kl")
    row("top-1 agreement", f"{r.top1_agreement:.3f}", f">= {t.min_top1_agreement:g}", "top1_agreement")
    row(
        "KL / reference information",
        f"{r.relative_kl:.3g} (info {r.ref_information:.3g} nats)",
        f"<= {t.max_relative_kl:g}",
        "relative_kl",
    )
    row("perplexity ref / quant", f"{r.ppl_ref:.2f} / {r.ppl_quant:.2f}", "", None)
    row("perplexity ratio", f"{r.ppl_ratio:.4f}", f"<= {t.max_ppl_ratio:g}", "ppl_ratio")
    row(
        "greedy agreement",
        f"{r.greedy_match_mean:.1f} / {r.greedy_tokens} tokens ({r.greedy_match_fraction:.0%})",
        "(reported)",
        None,
    )
    print_grid(console, table)
    if r.near_uniform:
        console.print(
            f"[yellow]note:[/] the reference's next-token distributions are near-uniform (information "
            f"{r.ref_information:.3g} < {t.near_uniform_nats:g} nats; random weights?): KL is judged relative "
            "to that information, and top-1 (near-ties) is reported, not judged.",
            highlight=False,
        )
    console.print(
        "[bold green]PASS[/]"
        if r.passed
        else "[bold red]FAIL[/]: " + ", ".join(k for k, ok in r.checks.items() if not ok)
    )
