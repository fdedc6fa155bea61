"""Collective bandwidth the way nccl-tests defines it, and what to read from a sweep of sizes.

size (bytes) per op, as nccl-tests prints it:
  all_reduce      the buffer reduced (count × type size)
  all_gather      the gathered output (per-rank input × n)
  reduce_scatter  the input reduced (per-rank output × n)
  all_to_all      each rank's send buffer
  sendrecv        the bytes each rank sends to its neighbour
algbw = size / time;  busbw = algbw × factor, factor = 2(n−1)/n for all_reduce, (n−1)/n for
all_gather, reduce_scatter and all_to_all, 1 for sendrecv. busbw is comparable to the link's
peak whatever the number of ranks. GB/s here are 10^9 bytes per second, like nccl-tests.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv")
STRAGGLER_RATIO = 1.10  # a rank this much slower than the median rank is reported


def bus_factor(op: str, n: int) -> float:
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op == "sendrecv":
        return 1.0
    raise ValueError(f"unknown op {op!r}; choose from {', '.join(OPS)}")


@dataclass
class CommRow:
    op: str
    size_bytes: int
    count: int  # elements, as nccl-tests' "count" column
    dtype: str
    redop: str  # "sum" or "none"
    time_us: float  # the slowest rank's mean time per iteration
    algbw_gbs: float
    busbw_gbs: float
    rank_times_us: list[float]
    straggler_rank: int | None = None  # a rank > STRAGGLER_RATIO × the median rank's time


def make_row(op: str, size_bytes: int, count: int, dtype: str, n: int, rank_times_s: list[float]) -> CommRow:
    t = max(rank_times_s)
    algbw = size_bytes / t / 1e9 if t > 0 else 0.0
    med = statistics.median(rank_times_s)
    slowest = max(range(len(rank_times_s)), key=lambda r: rank_times_s[r])
    straggler = slowest if len(rank_times_s) > 2 and med > 0 and rank_times_s[slowest] > STRAGGLER_RATIO * med else None
    return CommRow(
        op=op,
        size_bytes=size_bytes,
        count=count,
        dtype=dtype,
        redop="sum" if op in ("all_reduce", "reduce_scatter") else "none",
        time_us=t * 1e6,
        algbw_gbs=algbw,
        busbw_gbs=algbw * bus_factor(op, n),
        rank_times_us=[x * 1e6 for x in rank_times_s],
        straggler_rank=straggler,
    )


def plateau(rows: list[CommRow]) -> dict:
    """Large-message plateau of one op: median busbw of the three largest sizes, and the smallest
    size that reaches 90% of it (below that, latency dominates)."""
    rows = sorted(rows, key=lambda r: r.size_bytes)
    if not rows:
        return {}
    top = statistics.median(r.busbw_gbs for r in rows[-3:])
    reach = next((r.size_bytes for r in rows if r.busbw_gbs >= 0.9 * top), rows[-1].size_bytes)
    return {"busbw_gbs": top, "reached_at_bytes": reach}


def parse_size(text: str) -> int:
    """'1K', '64M', '1G', '4096' -> bytes (binary multiples, as nccl-tests' -b/-e)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.I)
    if not m:
        raise ValueError(f"size must look like 1024, 1K, 64M or 1G, got {text!r}")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]


def size_steps(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    if min_bytes <= 0 or max_bytes < min_bytes:
        raise ValueError("need 0 < --min-bytes <= --max-bytes")
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= factor
    return out


def human_bytes(n: int) -> str:
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)
