"""A run's requests as columns: one pandas row per request, the inter-token gaps pooled apart.

Every statistic in analyzers/ is computed from this table, whether the records come from a
requests.jsonl on disk (`llmbench report`, `compare`) or from the sweep's memory (its live
summary), so there is one set of statistics code. The gaps (`itl_s`) live outside the DataFrame
in one flat array with the row each gap belongs to: a pooled ITL percentile is then one numpy
call instead of a Python loop over lists.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import json
import json.scanner
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pandas as pd

from rundir.record_checks import ReadReport, check_columns, check_gaps
from rundir.records import BOOL_COLUMNS, FLOAT_COLUMNS, LIST_COLUMNS, TEXT_COLUMNS, RequestRecord
from rundir.run_dir import RunDir


@dataclass
class RequestTable:
    df: pd.DataFrame  # one row per request; numeric columns are float64 with NaN for null
    itl: np.ndarray  # every inter-token gap of every request, in row order
    itl_row: np.ndarray  # the df row (position) each gap belongs to
    read: ReadReport | None = None  # lines the reader could not use (from a file only)

    @property
    def warnings(self) -> list[str]:
        return self.read.warnings() if self.read else []

    # ----- building -------------------------------------------------------------------------
    @classmethod
    def from_dicts(
        cls, rows: list[dict[str, Any]], line_numbers: np.ndarray | None = None, path: str = "records"
    ) -> "RequestTable":
        """Columns straight from parsed JSON objects (unknown keys are ignored, missing ones null).
        A field of the wrong type raises RunDirError naming `path` and the line."""
        # pandas' own list-of-dicts conversion is several times faster than one comprehension per column.
        df = pd.DataFrame(rows, columns=[*FLOAT_COLUMNS, *TEXT_COLUMNS, *BOOL_COLUMNS, *LIST_COLUMNS])
        lines = line_numbers if line_numbers is not None else np.arange(1, len(rows) + 1)
        if len(df):
            check_columns(df, lines, path)
        gaps = [g if g.__class__ is list else () for g in df.pop("itl_s").to_numpy()]
        for name in FLOAT_COLUMNS:
            df[name] = pd.to_numeric(df[name], errors="coerce").astype(float)  # null -> NaN
        df["in_window"] = df["in_window"].fillna(False).astype(bool)
        lengths = np.fromiter(map(len, gaps), dtype=np.int64, count=len(gaps))
        try:
            itl = np.fromiter(itertools.chain.from_iterable(gaps), dtype=float, count=int(lengths.sum()))
        except (TypeError, ValueError):
            check_gaps(gaps, lines, path)
            raise
        df["n_itl"] = lengths
        return cls(df=derive_columns(df), itl=itl, itl_row=np.repeat(np.arange(len(rows)), lengths))

    @classmethod
    def from_records(cls, records: Iterable[RequestRecord]) -> "RequestTable":
        return cls.from_dicts([dataclasses.asdict(r) for r in records])

    @classmethod
    def load(cls, run: RunDir, chunk_lines: int = 100_000) -> "RequestTable":
        """Read requests.jsonl; a line that is not a record is skipped and counted (`warnings`), a
        record of the wrong shape raises RunDirError. Parsed in chunks so that a million records
        never exist as a million dicts at once."""
        parts: list[RequestTable] = []
        rows: list[dict[str, Any]] = []
        numbers: list[int] = []
        path = str(run.requests_jsonl)
        read = ReadReport(path)
        if run.requests_jsonl.exists():
            # The JSON parse is most of the cost of a big run. The C scanner called directly skips
            # json.loads' per-call wrapper (encoding detection, whitespace regexes), and the cyclic
            # GC, which would rescan every dict parsed so far again and again, is paused meanwhile.
            scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
            gc_was_on = gc.isenabled()
            gc.disable()
            try:
                with open(run.requests_jsonl, encoding="utf-8", errors="replace") as f:
                    for no, line in enumerate(f, start=1):
                        try:
                            row = scan(line, 0)[0]
                        except (ValueError, StopIteration):
                            row = None
                        if isinstance(row, dict) and "level_id" in row:
                            rows.append(row)
                            numbers.append(no)
                            if len(rows) == chunk_lines:
                                parts.append(cls.from_dicts(rows, np.asarray(numbers), path))
                                rows, numbers = [], []
                        elif line.endswith("\n") or line.strip():
                            if line.endswith("\n"):
                                read.add(no)
                            else:
                                read.torn_last_line = True  # the run was killed mid-write
            finally:
                if gc_was_on:
                    gc.enable()
        parts.append(cls.from_dicts(rows, np.asarray(numbers, dtype=np.int64), path))
        table = cls.concat(parts)
        table.read = read
        return table

    @classmethod
    def concat(cls, parts: list["RequestTable"]) -> "RequestTable":
        if len(parts) == 1:
            return parts[0]
        offsets = np.cumsum([0] + [len(p.df) for p in parts[:-1]])
        return cls(
            df=pd.concat([p.df for p in parts], ignore_index=True),
            itl=np.concatenate([p.itl for p in parts]),
            itl_row=np.concatenate([p.itl_row + off for p, off in zip(parts, offsets)]),
        )

    # ----- reading --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.df)

    def level_ids(self) -> list[str]:
        """Level ids in the order their first record appears."""
        return list(pd.unique(self.df["level_id"])) if len(self.df) else []

    def level_rows(self) -> dict[str, np.ndarray]:
        """Level id -> positions of its rows (one groupby pass, not one scan per level)."""
        if not len(self.df):
            return {}
        return {k: np.asarray(v) for k, v in self.df.groupby("level_id", sort=False).indices.items()}

    def gaps_of(self, row_mask: np.ndarray) -> np.ndarray:
        """The pooled inter-token gaps of the rows where `row_mask` (a boolean array over rows) is True."""
        return self.itl[row_mask[self.itl_row]] if self.itl.size else self.itl


def derive_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Token counts the statistics use, in RequestRecord.output_tokens_and_source's order: the server's
    usage, else max_tokens for a `length` finish, else the client tokenizer's count, else the
    token-carrying chunks (an estimate); `output_tokens_source` says which, also for records written
    before the field existed."""
    length = df["max_tokens"].where(df["finish_reason"] == "length")
    out = pd.Series(np.nan, index=df.index)
    source = pd.Series(None, index=df.index, dtype=object)
    for name, col in (
        ("usage", df["completion_tokens"]),
        ("length", length),
        ("tokenizer", df["client_completion_tokens"]),
        ("chunks", df["client_token_chunks"]),
    ):
        take = out.isna() & col.notna()
        out[take], source[take] = col[take], name
    df["out_tokens"] = out.fillna(0.0)
    df["output_tokens_source"] = source
    df["in_tokens"] = df["prompt_tokens"].fillna(df["client_prompt_tokens"]).fillna(0.0)
    return df
