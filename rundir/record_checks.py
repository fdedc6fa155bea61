"""Checking requests.jsonl's rows against RequestRecord's types, vectorized over a chunk.

A line that is not a JSON object with a level_id is *unreadable*: counted and reported (the torn
last line of a run killed mid-write is expected and only noted). A readable row whose field has
the wrong type (`"ttft_s": "abc"`) or an unknown status is an error that names the file and line:
a figure computed around it would be a wrong number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rundir.errors import RunDirError
from rundir.records import ERROR_KINDS, FLOAT_COLUMNS, REQUEST_STATUSES, TEXT_COLUMNS

MAX_LINES_NAMED = 5


@dataclass
class ReadReport:
    """What a reader skipped, for the user (the report shows it)."""

    path: str
    unreadable: list[int] = field(default_factory=list)  # line numbers (1-based) not counted
    torn_last_line: bool = False

    def add(self, line_no: int) -> None:
        self.unreadable.append(line_no)

    def warnings(self) -> list[str]:
        if not self.unreadable:
            return []
        named = ", ".join(map(str, self.unreadable[:MAX_LINES_NAMED])) + (
            " ..." if len(self.unreadable) > MAX_LINES_NAMED else ""
        )
        return [f"{self.path}: {len(self.unreadable)} line(s) could not be read and are not counted (line {named})"]


def check_columns(df: pd.DataFrame, line_numbers: np.ndarray, path: str) -> None:
    """Raise RunDirError at the first row whose field has the wrong type or value."""
    for name in FLOAT_COLUMNS:
        col = df[name]
        if col.dtype != object:
            continue
        bad = col.notna() & pd.to_numeric(col.where(~col.map(lambda v: isinstance(v, bool))), errors="coerce").isna()
        _raise_first(bad, df, name, line_numbers, path, "a number")
    for name in TEXT_COLUMNS:
        col = df[name]
        bad = col.notna() & ~col.map(lambda v: isinstance(v, str) or (isinstance(v, float) and v != v))
        _raise_first(bad, df, name, line_numbers, path, "a string")
    _raise_first(
        ~df["status"].isin(REQUEST_STATUSES), df, "status", line_numbers, path, "one of " + ", ".join(REQUEST_STATUSES)
    )
    kinds = df["error_kind"]
    _raise_first(
        kinds.notna() & ~kinds.isin(ERROR_KINDS),
        df,
        "error_kind",
        line_numbers,
        path,
        "one of " + ", ".join(ERROR_KINDS),
    )
    win = df["in_window"]
    _raise_first(
        win.notna() & ~win.map(lambda v: isinstance(v, bool)), df, "in_window", line_numbers, path, "true or false"
    )


def _raise_first(
    bad: pd.Series, df: pd.DataFrame, name: str, line_numbers: np.ndarray, path: str, expected: str
) -> None:
    if not bad.any():
        return
    i = int(np.flatnonzero(bad.to_numpy())[0])
    raise RunDirError(f"{path}:{int(line_numbers[i])}: field {name!r} must be {expected}, got {df[name].iat[i]!r}")


def check_gaps(gaps: list[Any], line_numbers: np.ndarray, path: str) -> None:
    """itl_s must be a list of numbers (called only when the fast conversion failed)."""
    for i, g in enumerate(gaps):
        if any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in g):
            raise RunDirError(f"{path}:{int(line_numbers[i])}: field 'itl_s' must be a list of numbers")
