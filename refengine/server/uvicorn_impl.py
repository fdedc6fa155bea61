"""Which of uvicorn's implementations serve: its HTTP parser and its event loop (its --http, --loop).

The server is one process: the engine steps on one thread, HTTP is served on the event loop's, and
the two share the GIL. Every streamed token costs the event loop a parse-free but Python-heavy trip
(an SSE chunk through Starlette into the protocol's write); with pure-Python h11 and asyncio's loop
that trip holds the GIL several times longer than with httptools (C) and uvloop (libuv), and each
moment it holds it the engine's step waits. vLLM serves with the same pair (uvicorn[standard]).
"auto" takes httptools and uvloop where installed (they are dependencies), else h11 and asyncio.
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
