"""`llmbench`: the main CLI. Each later feature (serve, sweep, report, compare) adds a command here."""

from __future__ import annotations

import time
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

# The commands live in their packages; their heavy imports are inside them (lazy), so --help is quick.
from llmbench.capacity.cli import capacity
from llmbench.cli_common import make_console, user_errors
from llmbench.export import export
from llmbench.quality.cli import quality
from llmbench.report import compare, report
from llmbench.runs import runs
from llmbench.sweep.cli import sweep, worker

app = typer.Typer(
    help="Benchmark, profile and diagnose LLM inference. Bundled with the refengine reference engine.",
    no_args_is_help=True,
    add_completion=False,
)
console = make_console()


@app.command()
def generate(
    prompts: list[str] = typer.Argument(..., help="One or more prompts; each is completed independently."),
    model: str = typer.Option("tiny", help="A built-in preset (tiny, tiny-test) or a Hugging Face model directory."),
    max_tokens: int = typer.Option(32, help="Tokens to generate per prompt (vLLM: max_tokens)."),
    temperature: float = typer.Option(0.0, help="0 is greedy; higher samples more randomly."),
    top_p: float = typer.Option(1.0, help="Nucleus sampling: keep the smallest token set with this much mass."),
    top_k: int = typer.Option(0, help="Keep only the k most likely tokens (0 disables)."),
    seed: Optional[int] = typer.Option(None, help="Per-request sampling seed for reproducible sampling."),
    ignore_eos: bool = typer.Option(False, help="Keep generating past the end-of-sequence token."),
    dtype: str = typer.Option("auto", help="auto (float32 on CPU, bfloat16 on GPU), float32, bfloat16, float16."),
    max_model_len: Optional[int] = typer.Option(None, help="Longest prompt + output in tokens (default: the model's)."),
    kv_cache_memory_bytes: Optional[int] = typer.Option(None, help="KV cache budget in bytes (default 1 GiB)."),
) -> None:
    """Complete prompts with the reference engine and print the text (a smoke test you can run)."""
    from refengine import LLM, SamplingParams

    with user_errors():
        t0 = time.perf_counter()
        with console.status(f"loading {model} ..."):
            llm = LLM(
                model=model, dtype=dtype, max_model_len=max_model_len, kv_cache_memory_bytes=kv_cache_memory_bytes
            )
        load_s = time.perf_counter() - t0
        params = SamplingParams(
            max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, ignore_eos=ignore_eos
        )
        t1 = time.perf_counter()
        with Progress(
            TextColumn("generating"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as bar:
            task = bar.add_task("gen", total=len(prompts))
            outputs = llm.generate(prompts, params, progress=lambda done, _total: bar.update(task, completed=done))
        gen_s = time.perf_counter() - t1
    n_tokens = 0
    for out in outputs:
        completion = out.outputs[0]
        n_tokens += len(completion.token_ids)
        console.print(out.prompt, style="bold", end="", highlight=False, markup=False)
        console.print(completion.text, highlight=False, markup=False)
        console.print(f"[dim]({len(completion.token_ids)} tokens, finish_reason={completion.finish_reason})[/]")
    console.print(
        f"[dim]model load {load_s:.1f} s; {n_tokens} tokens in {gen_s:.2f} s "
        f"({n_tokens / max(gen_s, 1e-9):.1f} tok/s)[/]"
    )


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []})
def serve(ctx: typer.Context) -> None:
    """Serve the reference engine: OpenAI-compatible /v1/completions and /v1/chat/completions (SSE streaming),
    /v1/models, /health and Prometheus /metrics in vLLM's names. Engine flags use vLLM's spelling
    (--max-num-seqs, --no-enable-prefix-caching, ...); `llmbench serve --help` lists them all."""
    from refengine.server.cli import main

    raise typer.Exit(code=main(list(ctx.args), prog="llmbench serve"))


app.command(help=sweep.__doc__)(sweep)
app.command(help=worker.__doc__)(worker)

app.command(help=capacity.__doc__)(capacity)

app.command(help=report.__doc__)(report)
app.command(help=compare.__doc__)(compare)
app.command(help=runs.__doc__)(runs)
app.command(help=export.__doc__)(export)

app.command(help=quality.__doc__)(quality)


@app.command()
def version() -> None:
    """Print the llmbench version."""
    from llmbench import __version__

    console.print(f"llmbench {__version__}")


if __name__ == "__main__":
    app()
