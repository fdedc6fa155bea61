"""What both CLIs share: turning user mistakes into one clean line instead of a traceback."""

from __future__ import annotations

import contextlib
import signal
import threading

import typer
from rich.console import Console


def make_console(stderr: bool = False) -> Console:
    """The console every command prints through. In a terminal rich wraps text to its width; into a
    file, a pipe or a CI log a message stays on one line, so that grep finds the server's own words
    ("quota exhausted for this key") where a wrap at 80 columns would have split them. Tables keep
    their layout either way."""
    console = Console(stderr=stderr)
    if not console.is_terminal:
        console.soft_wrap = True
    return console


err_console = make_console(stderr=True)


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


@contextlib.contextmanager
def terminate_as_interrupt():
    """SIGTERM (`kill PID`, a CI job cancelled, a container stopped) stops a long command the way
    Ctrl-C does: the levels stop in order, the run directory is marked interrupted and can be
    resumed, and the processes the command started (the bundled engine, the load generator's) are
    stopped instead of orphaned. A process started without a terminal often ignores SIGINT
    (a shell without job control starts background jobs so), so SIGTERM is its only polite stop.
    The previous handler is put back on the way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
