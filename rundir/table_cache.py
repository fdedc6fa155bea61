"""A columnar copy of requests.jsonl, so that a big run is parsed once, not on every report.

Python's json module parses ~20–60 µs per request line on these 2-core machines: a million
records take most of a minute, while summarizing them takes about a second. The first load
writes `<run>/.cache/requests.npz` (numeric columns as float64, text columns as codes into a
table of distinct strings, the pooled gaps); later loads read it in about a second. The cache
is keyed by requests.jsonl's size and modification time, so a file that grew (a running sweep)
or was rewritten (`--resume` sets records aside) is parsed afresh. It is derived data: deleting
it is always safe, and a cache that cannot be read or written is ignored.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rundir.records import FLOAT_COLUMNS, TEXT_COLUMNS
from rundir.run_dir import RunDir
from rundir.table import RequestTable, derive_columns

CACHE_VERSION = 4  # bump when the columns change
MIN_RECORDS_TO_CACHE = 20_000  # small runs parse faster than a cache file is worth


def cache_path(run: RunDir) -> Path:
    return run.table_cache


def _key(run: RunDir) -> np.ndarray:
    st = run.requests_jsonl.stat()
    return np.array([CACHE_VERSION, st.st_size, st.st_mtime_ns], dtype=np.int64)


def load_cached(run: RunDir) -> RequestTable:
    """RequestTable.load(run), through the cache when it is valid; writes the cache for big runs."""
    if not run.requests_jsonl.exists():
        return RequestTable.load(run)
    key = _key(run)
    path = cache_path(run)
    if path.exists():
        try:
            with np.load(path, allow_pickle=False) as z:
                if np.array_equal(z["key"], key):
                    return _from_npz(z)
        except (OSError, KeyError, ValueError, zipfile.BadZipFile):
            pass  # unreadable cache: parse the JSON instead
    table = RequestTable.load(run)
    if len(table) >= MIN_RECORDS_TO_CACHE:
        try:
            _write(path, table, key)
        except OSError:
            pass  # a read-only run directory: no cache, same result
    return table


def _write(path: Path, table: RequestTable, key: np.ndarray) -> None:
    path.parent.mkdir(exist_ok=True)
    arrays = {
        "key": key,
        "itl": table.itl,
        "itl_row": table.itl_row,
        "in_window": table.df["in_window"].to_numpy(),
        "n_itl": table.df["n_itl"].to_numpy(),
    }
    for name in FLOAT_COLUMNS:
        arrays[f"f_{name}"] = table.df[name].to_numpy(dtype=float)
    for name in TEXT_COLUMNS:
        codes, uniques = pd.factorize(table.df[name], use_na_sentinel=True)
        arrays[f"c_{name}"] = codes.astype(np.int32)
        arrays[f"u_{name}"] = np.array([str(u) for u in uniques], dtype=np.str_)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def _from_npz(z: Any) -> RequestTable:  # an NpzFile
    cols: dict[str, object] = {name: z[f"f_{name}"] for name in FLOAT_COLUMNS}
    for name in TEXT_COLUMNS:
        uniques = np.append(z[f"u_{name}"].astype(object), np.array([None], dtype=object))  # code -1 -> None
        cols[name] = uniques[z[f"c_{name}"]]
    cols["in_window"] = z["in_window"]
    df = pd.DataFrame(cols)
    df["n_itl"] = z["n_itl"]
    return RequestTable(df=derive_columns(df), itl=z["itl"], itl_row=z["itl_row"])
