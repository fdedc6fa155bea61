"""The options that name and reach the target, declared once for every command that sweeps one
(`llmbench sweep`, `llmbench capacity`): the same flag means the same thing, with the same help."""

from __future__ import annotations

import typer

from refengine.server.dp_policy import REPLICA_HEADER as FRONT_REPLICA_HEADER

TARGET = typer.Option(None, help="Base URL of an OpenAI-compatible server; default: start the bundled engine on a "
                      "free loopback port. Several, comma-separated (URL1,URL2): replicas driven directly, the "
                      "client sending to each in turn (round robin); each request's record names its URL.")
MODEL = typer.Option(None, help="Model name to send (--target; default: the one model its /v1/models lists) or to "
                     "serve (embedded, default tiny).")
API_KEY = typer.Option(None, envvar="OPENAI_API_KEY", help="Bearer token for --target.")
ENDPOINT = typer.Option("completions", help="completions (/v1/completions) or chat (/v1/chat/completions).")
IGNORE_EOS = typer.Option(True, help="Send ignore_eos so outputs have the requested length (a server that refuses "
                          "it is detected by the preflight and the field dropped).")
DATA_PARALLEL_SIZE = typer.Option(1, min=1, help="Embedded engine only: serve N replicas behind one front "
                                  "(`llmbench serve --data-parallel-size N`); recorded as run.json's "
                                  "target.replicas. An external fleet is one --target URL: its router balances.")
REPLICA_HEADER = typer.Option(FRONT_REPLICA_HEADER, help="Response header naming the replica that served each "
                              "request, recorded in its record's `replica` (default: the header the bundled "
                              "fleet's front sets; use your router's, e.g. one that names the upstream; '' to "
                              "read none).")


def target_urls(text: str | None) -> list[str]:
    """--target's URLs in order (none: the embedded engine); a user error names the one at fault."""
    if text is None:
        return []
    urls = [u.strip().rstrip("/") for u in text.split(",")]
    for u in urls:
        if not u.startswith(("http://", "https://")):
            raise typer.BadParameter(f"must be a URL like http://127.0.0.1:8000, got {u!r}", param_hint="--target")
    if len(set(urls)) != len(urls):
        raise typer.BadParameter(f"a URL is listed twice in {text!r}", param_hint="--target")
    return urls
