"""Every request of several runs as one table, for pandas or DuckDB users (`llmbench export`).

One row per record of each run's requests.jsonl: the columns of RequestTable (every RequestRecord
field, and the derived token counts `in_tokens`, `out_tokens`, `output_tokens_source`, `n_itl`),
with three columns in front: `run_id` (run.json's), `load` (the level's concurrency or request
rate) and `load_kind` (`concurrency` | `request_rate`). Counts are nullable integers; `itl_s`, the
request's inter-token gaps, is a list column in Parquet and is left out of CSV (one cell cannot
hold a list): docs/run-format.md, "Exporting requests".
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from rundir.records import RequestRecord
from rundir.run_dir import RunDir
from rundir.table_cache import load_cached

FRONT = ["run_id", "level_id", "load", "load_kind"]
INT_COLUMNS = [f.name for f in dataclasses.fields(RequestRecord) if f.type in ("int", "int | None")] + ["n_itl"]


def run_requests(run: RunDir) -> pd.DataFrame:
    """One run's records as a frame with the export's columns (itl_s as a column of lists)."""
    table = load_cached(run)
    df = table.df.copy()
    cuts = np.cumsum(df["n_itl"].to_numpy())[:-1]  # row k's gaps end where row k+1's begin
    df["itl_s"] = [gaps.tolist() for gaps in np.split(table.itl, cuts)] if len(df) else []
    closed = df["concurrency"].notna()
    df["load"] = df["concurrency"].where(closed, df["request_rate"])
    df["load_kind"] = np.where(closed, "concurrency", "request_rate")
    df["run_id"] = run.read_info().run_id
    for name in INT_COLUMNS:
        df[name] = df[name].round().astype("Int64")
    return df[FRONT + [c for c in df.columns if c not in FRONT]]


def requests_of(runs: list[RunDir]) -> pd.DataFrame:
    """The records of every run, one after another, in the order given."""
    frames = [run_requests(r) for r in runs]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=FRONT)


def write_parquet(df: pd.DataFrame, path: Path) -> None:
    """Parquet through pyarrow (a dependency of the project: pyproject.toml)."""
    df.to_parquet(path, index=False, engine="pyarrow")


def write_csv(df: pd.DataFrame, path: Path) -> None:
    df.drop(columns=["itl_s"], errors="ignore").to_csv(path, index=False)
