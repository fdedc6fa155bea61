"""Reading and parsing a request body within limits: size (413), time (408), JSON shape (400).

Python's json module would otherwise let a client choose the failure: 100,000 nested arrays
raise RecursionError, a 5,001-digit integer raises ValueError (sys.int_info's 4,300-digit cap),
`NaN` and lone surrogates ("\\ud800") parse into values that crash later code. Here every one of
them is a 400 that says what was wrong, and where, before any field is read.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect

from refengine.server.protocol import ApiError


@dataclass(frozen=True)
class BodyLimits:
    max_bytes: int = 32 * 1024 * 1024  # --max-request-body-bytes
    timeout_s: float = 30.0  # --timeout-request-body: the whole body, from the headers on
    max_depth: int = 64  # nesting of arrays and objects


MAX_INT_DIGITS = 40  # longer integer literals are no field's value (fields are 64-bit at most)


async def read_body(request, limits: BodyLimits) -> bytes:
    """The whole body, or ApiError 413 (too large: by Content-Length, or while streaming a chunked
    body) / 408 (not all there within timeout_s: a slow or half-sent body)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limits.max_bytes:
        raise _too_large(limits, f"Content-Length is {declared}")
    try:
        return await asyncio.wait_for(_read(request, limits), limits.timeout_s)
    except asyncio.TimeoutError:
        raise ApiError(
            408,
            f"the request body did not arrive within {limits.timeout_s:g} s (--timeout-request-body); send it at once",
            code="request_timeout",
        ) from None
    except ClientDisconnect:  # nobody will read the answer; it is counted, not logged as our failure
        raise ApiError(
            400, "the client went away before its request body arrived", code="client_disconnected"
        ) from None


async def _read(request, limits: BodyLimits) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limits.max_bytes:
            raise _too_large(limits, f"more than {limits.max_bytes} bytes arrived")
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limits: BodyLimits, what: str) -> ApiError:
    return ApiError(
        413,
        f"the request body is too large ({what}); the limit is {limits.max_bytes} bytes (--max-request-body-bytes)",
        code="request_too_large",
    )


class HugeInt:
    """An integer literal too long to be any field's value; validation names the field."""

    def __init__(self, digits: str):
        self.digits = digits

    def __repr__(self) -> str:
        return f"<an integer of {len(self.digits.lstrip('-'))} digits>"


def _bounded_int(text: str):
    return HugeInt(text) if len(text) > MAX_INT_DIGITS else int(text)


def parse_json(raw: bytes, max_depth: int = 64) -> dict:
    """The body as a dict, or ApiError 400. Runs off the event loop (a 32 MiB body takes a while)."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise _too_deep(max_depth) from None
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"the request body is not valid UTF-8: {exc}") from None
    except ValueError:  # an integer literal past sys.get_int_max_str_digits(): parse again, marking it
        try:
            body = json.loads(raw, parse_int=_bounded_int)
        except (ValueError, RecursionError) as exc:
            raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    _check_shape(raw, body, max_depth)
    return body


def _too_deep(max_depth: int) -> ApiError:
    return ApiError(400, f"the request body nests arrays/objects more than {max_depth} deep")


# A lone surrogate reaches a str only as a \\uD800-\\uDFFF escape or as its UTF-8-like bytes
# (json.loads decodes bytes with 'surrogatepass'); without either, the walk can skip strings.
_SURROGATE_HINT = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _check_shape(raw: bytes, body: dict, max_depth: int) -> None:
    """Depth <= max_depth and no lone surrogate in any key or string. Cheap in the usual case: a
    body with fewer brackets than max_depth cannot nest deeper, one without a surrogate escape
    has none; otherwise one iterative walk (no recursion to exhaust)."""
    deep = raw.count(b"[") + raw.count(b"{") > max_depth
    strings = _SURROGATE_HINT.search(raw) is not None
    if not deep and not strings:
        return
    # (a dict or list to walk, its depth, the top-level key it is under: None at the top)
    stack: list[tuple[dict[str, Any] | list[Any], int, str | None]] = [(body, 1, None)]
    while stack:
        node, depth, top = stack.pop()
        pairs = node.items() if isinstance(node, dict) else ((None, v) for v in node)
        for key, value in pairs:
            where = top if top is not None else key
            assert where is not None, "the body is an object: every value is under one of its keys"
            if key is not None and strings:
                _check_str(key, where)
            if isinstance(value, str):
                if strings:
                    _check_str(value, where)
            elif isinstance(value, (list, dict)):
                if depth >= max_depth:
                    shown = _shown(where)
                    raise ApiError(400, f"'{shown}' nests arrays/objects more than {max_depth} deep", param=shown)
                stack.append((value, depth + 1, where))


def _check_str(s: str, top: str) -> None:
    if s.isascii():
        return
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        where = _shown(top)
        raise ApiError(
            400,
            f"'{where}' contains invalid Unicode: a lone surrogate "
            f"{s[exc.start]!r} at character {exc.start}; send UTF-8 text",
            param=where,
        ) from None


def _shown(key: str) -> str:
    """A key fit to echo back: valid UTF-8, at most 64 characters."""
    safe = key.encode("utf-8", "backslashreplace").decode("utf-8")
    return safe if len(safe) <= 64 else safe[:61] + "..."
