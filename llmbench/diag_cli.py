"""`llmdiag`: diagnoses (oom, p99, plan, probes) — each arrives with its issue; only working commands are registered."""

from __future__ import annotations

import typer
from rich.console import Console

app = typer.Typer(help="Diagnose LLM inference deployments: why it ran out of memory, why P99 is bad.",
                  no_args_is_help=True, add_completion=False)
console = Console()


@app.callback()
def main() -> None:
    """Diagnose LLM inference deployments."""


@app.command()
def version() -> None:
    """Print the llmdiag (llmbench) version."""
    from llmbench import __version__

    console.print(f"llmdiag (llmbench {__version__})")


if __name__ == "__main__":
    app()
