"""Parsers for CLI values that every command spells the same way (lists, durations): one place."""

from __future__ import annotations

import re

import typer


def parse_list(text: str | None, kind=int, name: str = "value") -> list:
    """'1,8,32' -> [1, 8, 32]; an empty item, an empty string or a non-number is a one-line error."""
    if text is None:
        return []
    items = text.replace(" ", "").split(",")
    if not text.strip() or any(not x for x in items):
        raise typer.BadParameter(
            f"must be a comma-separated list of numbers like 1,8,32, got {text!r}", param_hint=name
        )
    try:
        return [kind(x) for x in items]
    except ValueError:
        raise typer.BadParameter(f"must be a comma-separated list of numbers, got {text!r}", param_hint=name) from None


def parse_duration(text: str, name: str) -> float:
    """'30', '30s', '500ms', '3m', '1h' -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*", text)
    if not m:
        raise typer.BadParameter(f"must look like 30, 30s, 3m or 1h, got {text!r}", param_hint=name)
    return float(m.group(1)) * {"ms": 0.001, None: 1, "s": 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]


def seconds_text(seconds: float) -> str:
    """A default duration as the CLI spells it (20.0 -> '20s', 180.0 -> '3m')."""
    return f"{seconds / 60:g}m" if seconds >= 60 and seconds % 60 == 0 else f"{seconds:g}s"
