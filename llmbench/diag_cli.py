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


from llmbench.diag_probe_cli import comm, pcap, probe  # noqa: E402  (probes, collective bandwidth, pcap analysis)

app.command(help=probe.__doc__)(probe)
app.command(help=comm.__doc__)(comm)
app.command(help=pcap.__doc__)(pcap)

from llmbench.diag_oom_cli import oom  # noqa: E402  (memory model, OOM logs, KV ramp)
from llmbench.diag_plan_cli import plan  # noqa: E402  (parallel plan ranking)

app.command(help=" ".join(oom.__doc__.split()))(oom)      # one paragraph: rich keeps docstring line breaks
app.command(help=" ".join(plan.__doc__.split()))(plan)

from llmbench.diag_p99_cli import p99  # noqa: E402  (tail triage: network, scheduling, host)

app.command(help=" ".join(p99.__doc__.split()))(p99)


if __name__ == "__main__":
    app()
