"""Request classes: the prompt lengths of one level, summarized apart.

A mixed workload (loadgen's `mixed`: mostly short prompts and a share of long ones) is the
head-of-line blocking experiment: what matters there is the short requests' TTFT, which the
level's pooled percentiles hide behind the long prompts' own slow first token. So when a
level's requests carry a handful of distinct target prompt lengths, each length is also
summarized as a class `<level>/in<len>`, kept beside the levels (not in them: scaling and SLO
answers stay per level) and compared by `llmbench compare` like a level.
"""

from __future__ import annotations

import numpy as np

from rundir.table import RequestTable

MAX_CLASSES = 4  # more distinct lengths than this is a length spread, not classes


def class_id(level_id: str, input_len: int) -> str:
    return f"{level_id}/in{input_len}"


def class_rows(table: RequestTable, rows: np.ndarray, level_id: str) -> dict[str, np.ndarray]:
    """Class id -> rows, for a level whose requests have 2..MAX_CLASSES distinct prompt lengths."""
    lens = table.df["target_input_len"].to_numpy(float)[rows]
    distinct = np.unique(lens[np.isfinite(lens)])
    if not 2 <= distinct.size <= MAX_CLASSES:
        return {}
    return {class_id(level_id, int(n)): rows[lens == n] for n in distinct}


def all_class_rows(table: RequestTable) -> dict[str, tuple[str, np.ndarray]]:
    """Class id -> (its level id, rows) over the whole run."""
    out = {}
    for level_id, rows in table.level_rows().items():
        for cid, crows in class_rows(table, rows, level_id).items():
            out[cid] = (level_id, crows)
    return out
