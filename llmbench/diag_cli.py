"""`llmdiag`: diagnoses (oom, p99, plan, probes) — each arrives with its issue; only working commands are registered."""

from __future__ import annotations

import typer

from llmbench.cli_common import make_console
from llmbench.diag.calibrate import calibrate  # machine profile for plan's predictions
from llmbench.diag.oom import oom  # memory model, OOM logs, KV ramp
from llmbench.diag.p99 import p99  # tail triage: network, scheduling, host
from llmbench.diag.plan import plan  # parallel plan ranking
from llmbench.diag.probe import comm, pcap, probe  # probes, collective bandwidth, pcap analysis

app = typer.Typer(
    help="Diagnose LLM inference deployments: why it ran out of memory, why P99 is bad.",
    no_args_is_help=True,
    add_completion=False,
)
console = make_console()


@app.callback()
def main() -> None:
    """Diagnose LLM inference deployments."""


@app.command()
def version() -> None:
    """Print the llmdiag (llmbench) version."""
    from llmbench import __version__

    console.print(f"llmdiag (llmbench {__version__})")


app.command(help=probe.__doc__)(probe)
app.command(help=comm.__doc__)(comm)
app.command(help=pcap.__doc__)(pcap)

app.command(help=" ".join((oom.__doc__ or "").split()))(oom)  # one paragraph: rich keeps docstring line breaks
app.command(help=" ".join((plan.__doc__ or "").split()))(plan)
app.command(help=" ".join((calibrate.__doc__ or "").split()))(calibrate)

app.command(help=" ".join((p99.__doc__ or "").split()))(p99)


if __name__ == "__main__":
    app()
