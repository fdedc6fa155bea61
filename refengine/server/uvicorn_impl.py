"""Which of uvicorn's implementations serve: its HTTP parser and its event loop (its --http, --loop).

The server is one process: the engine steps on one thread, HTTP is served on the event loop's, and
the two share the GIL (and, pinned, the cores). Every streamed token is an SSE chunk the event loop
writes, and what that costs the engine's step waits for. httptools (C) and uvloop (libuv) cost the
loop less than pure-Python h11 and asyncio's loop: measured on tiny-test, one core, the loop's CPU
per token fell by 20-30% relative to the engine's, to 7-15% of it (bench/http_impl.py,
bench/RESULTS.md); the end-to-end TPOT difference that buys (~3%) is below this host's drift.
vLLM serves with the same pair (uvicorn[standard]). "auto" takes httptools and uvloop where
installed (they are dependencies), else h11 and asyncio.
"""

from __future__ import annotations

import importlib.util

from uvicorn.config import HTTP_PROTOCOLS
from uvicorn.importer import import_from_string

from refengine.errors import RefEngineError

HTTP_IMPLEMENTATIONS = ("auto", "h11", "httptools")
EVENT_LOOPS = ("auto", "asyncio", "uvloop")


def http_protocol_class(http: str) -> type:
    """uvicorn's protocol class for `http`, or a one-line error when it is unknown or not installed."""
    if http not in HTTP_IMPLEMENTATIONS:
        raise RefEngineError(f"--http must be one of {', '.join(HTTP_IMPLEMENTATIONS)}, got {http!r}")
    try:
        return import_from_string(HTTP_PROTOCOLS[http])
    except ImportError as exc:
        raise RefEngineError(f"--http {http}: {exc} (pip install {http})") from None


def event_loop(loop: str) -> str:
    """`loop` checked before uvicorn starts (it would fail inside its run with a traceback)."""
    if loop not in EVENT_LOOPS:
        raise RefEngineError(f"--loop must be one of {', '.join(EVENT_LOOPS)}, got {loop!r}")
    if loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        raise RefEngineError("--loop uvloop: uvloop is not installed (pip install uvloop)")
    return loop


def implementations_in_use(http: str, loop: str) -> str:
    """What "auto" resolved to, for the server's start-up line."""
    parser = http_protocol_class(http).__name__.replace("Protocol", "").lower()
    running = loop if loop != "auto" else ("uvloop" if importlib.util.find_spec("uvloop") else "asyncio")
    return f"{parser}, {running}"
