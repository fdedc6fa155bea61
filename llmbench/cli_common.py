"""What both CLIs share: turning user mistakes into one clean line instead of a traceback."""

from __future__ import annotations

import contextlib

import typer
from rich.console import Console

err_console = Console(stderr=True)


@contextlib.contextmanager
def user_errors():
    """Print a RefEngineError (or any ValueError we raise for bad input) as one line and exit 2."""
    from refengine.errors import RefEngineError
    from rundir.errors import RunDirError

    try:
        yield
    except (RefEngineError, RunDirError) as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(code=2) from None
