"""The columnar cache of requests.jsonl gives the same table, and is not used once the file changes."""

import numpy as np
import pandas as pd
from synth_run import make_run, rec

from rundir import table_cache
from rundir.table import RequestTable
from rundir.table_cache import cache_path, load_cached


def test_cache_round_trip_and_invalidation(tmp_path, monkeypatch):
    monkeypatch.setattr(table_cache, "MIN_RECORDS_TO_CACHE", 1)
    records = [rec(i, 0.1 * i, 0.5 + 0.1 * i, 4, itl=[0.1, 0.2, 0.3]) for i in range(5)]
    records.append(rec(6, None, None, 4, status="error", kind="http_status", error="HTTP 500 ünïcode"))
    run = make_run(tmp_path / "r", records, {"c1": (0, 10)})
    parsed = load_cached(run)
    assert cache_path(run).is_file()
    cached = load_cached(run)
    pd.testing.assert_frame_equal(parsed.df, cached.df, check_dtype=False)
    assert np.array_equal(parsed.itl, cached.itl) and np.array_equal(parsed.itl_row, cached.itl_row)
    assert cached.df["error"].iloc[5] == "HTTP 500 ünïcode" and pd.isna(cached.df["error"].iloc[0])
    run.append_records([rec(7, 0.1, 0.2, 4)])  # the file grew: parse it again
    assert len(load_cached(run)) == 7 == len(RequestTable.load(run))
    cache_path(run).write_bytes(b"garbage")  # a broken cache is ignored
    assert len(load_cached(run)) == 7
