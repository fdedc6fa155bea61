"""The options that name and reach the target, declared once for every command that sweeps one
(`llmbench sweep`, `llmbench capacity`): the same flag means the same thing, with the same help."""

from __future__ import annotations

import typer

TARGET = typer.Option(None, help="Base URL of an OpenAI-compatible server; default: start the bundled engine on a "
                      "free loopback port.")
MODEL = typer.Option(None, help="Model name to send (--target; default: the one model its /v1/models lists) or to "
                     "serve (embedded, default tiny).")
API_KEY = typer.Option(None, envvar="OPENAI_API_KEY", help="Bearer token for --target.")
ENDPOINT = typer.Option("completions", help="completions (/v1/completions) or chat (/v1/chat/completions).")
IGNORE_EOS = typer.Option(True, help="Send ignore_eos so outputs have the requested length (a server that refuses "
                          "it is detected by the preflight and the field dropped).")
