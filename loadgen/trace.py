"""Trace replay: production request traces as an open-loop workload sent at the trace's own times.

Formats (docs/workloads.md):
- Mooncake JSONL (kvcache-ai/Mooncake's traces): one object per line, `timestamp` (ms from the
  trace's start), `input_length`, `output_length`, `hash_ids` (one id per block of `block_size`
  prompt tokens, 512 in Mooncake's traces; equal ids are equal blocks, so requests that share
  leading ids share a prompt prefix);
- Azure LLM inference trace CSV (Azure/AzurePublicDataset, 2023/2024): header `TIMESTAMP`,
  `ContextTokens`, `GeneratedTokens`; the timestamp a date-time (`2023-11-16 18:15:46.6805900`)
  or seconds; no block ids, so every prompt is its own.

Prompts are text by default, sized with the workload's TextSizer: block `h` is always the same
words (drawn from a generator seeded by the workload seed and `h`), so two requests that share
hash ids share an identical text prefix and a prefix cache sees what the trace's cache saw. The
server's own constant (BOS, template) is taken off the last block, so prefixes stay intact.

The workload plays the trace once (its stream ends with the last row) unless it is told to
cycle (loadgen.trace_workload; docs/workloads.md, "Replay"). Cycling, request i is row
i mod n of the trace in pass i // n, sent at (pass x span + t_row) / speed after the level
started, where span is the trace's length plus one mean gap; a later pass salts its blocks, so it
does not hit the cache the first pass filled.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np

from loadgen.errors import WorkloadError

DEFAULT_BLOCK_SIZE = 512  # tokens per hash id in Mooncake's traces


@dataclass
class TraceRow:
    t_s: float  # seconds from the trace's first request
    input_len: int
    output_len: int
    hash_ids: list[int] = field(default_factory=list)


@dataclass
class Trace:
    rows: list[TraceRow]
    source: str  # mooncake | azure

    @property
    def span_s(self) -> float:
        """Length of one pass: first to last arrival plus one mean gap (so passes do not collide)."""
        n = len(self.rows)
        last = self.rows[-1].t_s
        return last + (last / (n - 1) if n > 1 and last > 0 else 1.0)

    def mean_rate(self, speed: float = 1.0) -> float:
        return len(self.rows) / self.span_s * speed


def load_trace(path: str | Path, limit: int | None = None) -> Trace:
    """Read a Mooncake JSONL or Azure CSV trace (by content, not by name); rows sorted by time,
    times from the first request, cut to the first `limit` rows."""
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(f"--dataset {p}: no such file")
    with open(p, encoding="utf-8") as f:
        head = f.readline()
    if head.lstrip().startswith("{"):
        rows, source = _mooncake(p), "mooncake"
    elif "TIMESTAMP" in head and "ContextTokens" in head:
        rows, source = _azure(p), "azure"
    else:
        raise WorkloadError(
            f"{p}: not a Mooncake JSONL trace (objects with timestamp, input_length, output_length, "
            "hash_ids) nor an Azure CSV trace (TIMESTAMP, ContextTokens, GeneratedTokens)"
        )
    if not rows:
        raise WorkloadError(f"{p}: the trace has no requests")
    rows.sort(key=lambda r: r.t_s)
    rows = rows[:limit] if limit else rows
    t0 = rows[0].t_s
    for r in rows:
        r.t_s -= t0
    return Trace(rows, source)


def _mooncake(p: Path) -> list[TraceRow]:
    rows = []
    for n, line in enumerate(open(p, encoding="utf-8"), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            rows.append(
                TraceRow(
                    float(d["timestamp"]) / 1000.0,
                    max(1, int(d["input_length"])),
                    max(1, int(d["output_length"])),
                    [int(h) for h in d.get("hash_ids", [])],
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise WorkloadError(f"{p}:{n}: not a Mooncake trace line ({type(exc).__name__}: {exc})") from None
    return rows


def _azure(p: Path) -> list[TraceRow]:
    rows = []
    with open(p, encoding="utf-8", newline="") as f:
        for n, d in enumerate(csv.DictReader(f), 2):
            try:
                rows.append(
                    TraceRow(
                        _seconds(d["TIMESTAMP"]), max(1, int(d["ContextTokens"])), max(1, int(d["GeneratedTokens"]))
                    )
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise WorkloadError(f"{p}:{n}: not an Azure trace row ({type(exc).__name__}: {exc})") from None
    return rows


def _seconds(stamp: str) -> float:
    s = stamp.strip()
    try:
        return float(s)
    except ValueError:
        pass
    date, _, frac = s.partition(".")
    base = datetime.strptime(date, "%Y-%m-%d %H:%M:%S").timestamp()
    return base + (float("0." + frac.rstrip("Z")) if frac else 0.0)  # 7 fractional digits: beyond strptime


def block_rng(seed: int, hash_id: int, salt: int) -> np.random.Generator:
    # Plain ints: the same words for a block in every process and every request that names it.
    return np.random.default_rng([seed & 0xFFFFFFFF, 7, hash_id & 0xFFFFFFFF, hash_id >> 32, salt])
