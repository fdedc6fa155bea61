"""The load generator's error taxonomy (rundir.ERROR_KINDS) for failures before a stream starts.

  connect        no HTTP response: refused, reset, unreachable, DNS, closed before the headers
  http_status    a response with a status other than 200
  stream_broken  the stream ended without [DONE], or carried an error object (see sse.py)
  timeout        the request's deadline (connect + whole stream) passed
  bad_payload    a data line that is not JSON (see sse.py)

Kept free of gevent and locust imports so that it can be used and tested anywhere; the
geventhttpclient wrapper exceptions are recognised by their `original` attribute.
"""

from __future__ import annotations

import errno
import socket

# Errors that mean nothing is listening (or reachable) at the target: repeated, they mean a dead
# server (a name that does not resolve counts too: nothing will answer there either).
_REFUSED_ERRNOS = {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL}


class WorkloadError(ValueError):
    """A workload that cannot be built from its options (bad option, missing or garbled file)."""


class LoadGeneratorError(RuntimeError):
    """The load generator itself failed (its processes did not start, crashed, or reported an error)."""


class RequestDeadline(TimeoutError):
    """Raised into a request's greenlet when its whole-request deadline passes. A TimeoutError, so
    every layer (geventhttpclient, the SSE reader) files it as a timeout."""


def root_cause(exc: BaseException) -> BaseException:
    """Unwrap geventhttpclient's RetriesExceeded(original=...) and similar wrappers."""
    seen = 0
    while seen < 8:
        inner = getattr(exc, "original", None)
        if not isinstance(inner, BaseException):
            return exc
        exc, seen = inner, seen + 1
    return exc


def classify_request_error(exc: BaseException) -> tuple[str, str]:
    """(error_kind, message) for an exception raised before the response headers arrived."""
    cause = root_cause(exc)
    text = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    if _is_timeout(cause):
        return "timeout", text
    return "connect", text


def is_refused(exc: BaseException) -> bool:
    """True when the failure says nobody is listening at the target (not just a slow or busy one)."""
    cause = root_cause(exc)
    return isinstance(cause, (ConnectionRefusedError, socket.gaierror)) or (
        isinstance(cause, OSError) and cause.errno in _REFUSED_ERRNOS
    )


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, TimeoutError):  # socket.timeout is TimeoutError since Python 3.10
        return True
    # gevent.Timeout is a BaseException that is not a TimeoutError; match it without importing gevent.
    return type(exc).__name__ == "Timeout" and type(exc).__module__.startswith("gevent")
