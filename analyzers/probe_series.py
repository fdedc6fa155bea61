"""Probe time series read back from probes/<name>.jsonl.

A row is `{"t": epoch_s, ...}`; fields may nest (per-cpu, per-gpu dicts or lists), so numeric
leaves are flattened to dotted names (`gpus.0.util`, `cpu.3.user`). Text leaves are kept apart
as the distinct values seen (an error string, a throttle reason). A probe file that is missing,
empty or torn yields no series, never an error: probes are optional evidence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rundir import RunDir

MAX_TEXT_VALUES = 20


@dataclass
class ProbeSeries:
    name: str
    t: np.ndarray  # epoch seconds, one per row
    numeric: dict[str, np.ndarray] = field(default_factory=dict)  # dotted field -> values (NaN where absent)
    text: dict[str, list[str]] = field(default_factory=dict)  # dotted field -> distinct values

    def __len__(self) -> int:
        return int(self.t.size)


def rows_covering(series: ProbeSeries, start: float, end: float) -> np.ndarray:
    """The rows whose intervals cover (start, end]: a row covers the interval since the previous
    scrape, so the first row after the end still holds part of it."""
    after = np.flatnonzero(series.t > end)
    last = after[0] if after.size else len(series) - 1
    return (series.t > start) & (np.arange(len(series)) <= last)


def flatten(obj, prefix: str = "") -> dict[str, object]:
    """Nested dicts and lists -> {"a.b.0.c": leaf}."""
    out: dict[str, object] = {}
    items = obj.items() if isinstance(obj, dict) else enumerate(obj)
    for k, v in items:
        key = f"{prefix}{k}"
        if isinstance(v, (dict, list, tuple)):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def read_probe(path: Path, name: str | None = None) -> ProbeSeries | None:
    if not path.is_file():
        return None
    rows: list[tuple[int | float, dict[str, object]]] = []  # (t, flattened fields other than t)
    with open(path, "rb") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue  # torn last line of a probe still writing
            if isinstance(row, dict) and isinstance(t := row.get("t"), (int, float)):
                rows.append((t, flatten({k: v for k, v in row.items() if k != "t"})))
    if not rows:
        return None
    rows.sort(key=lambda r: r[0])
    series = ProbeSeries(name or path.stem, np.array([t for t, _ in rows], dtype=float))
    keys = dict.fromkeys(k for _, r in rows for k in r)
    for key in keys:
        values = [r.get(key) for _, r in rows]
        if all(
            v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) or isinstance(v, bool)
            for v in values
        ):
            series.numeric[key] = np.array([float(v) if isinstance(v, (int, float)) else np.nan for v in values])
        else:
            distinct = list(dict.fromkeys(str(v) for v in values if v is not None))
            series.text[key] = distinct[:MAX_TEXT_VALUES]
    return series


def read_probes(run: RunDir) -> list[ProbeSeries]:
    """Every probes/*.jsonl of the run that has rows, sorted by name."""
    folder = run.probes_dir
    if not folder.is_dir():
        return []
    found = (read_probe(p) for p in sorted(folder.glob("*.jsonl")))
    return [s for s in found if s is not None]
