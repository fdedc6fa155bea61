"""Other processes one by one: which of them took CPU in the spike windows and not in the calm.

The host probe names the busiest other processes of each interval (`top_others`: pid, comm,
cores). On a shared host the aggregate of "other processes" hides a neighbour behind a steady
background (a compiler, another user's tests); per process, the background is as busy in the calm
as in the spikes, while the neighbour that caused the spikes is not. A process absent from an
interval's list counts 0 there (it was not among the busiest).
"""

from __future__ import annotations

import json
from pathlib import Path

from analyzers.triage.evidence import SampleSplit

SPIKING_LIFT = 2.0  # a process busy in the spikes at this many times its calm use ...
SPIKING_EXTRA = 0.05  # ... and at least this many cores more (many small burners add up:
# the check sums what the spiking processes took together)


def read_top_others(path: Path) -> dict[float, list[dict]]:
    """t -> top_others of each host probe row (the flattened series keeps numbers only)."""
    out: dict[float, list[dict]] = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and isinstance(row.get("top_others"), list) and "t" in row:
                    out[float(row["t"])] = row["top_others"]
    except OSError:
        pass
    return out


def per_process(rows: dict[float, list[dict]], host: SampleSplit) -> list[dict]:
    """[{pid, comm, cpu_cores_spikes, cpu_cores_calm}] for every named process, busiest in the spikes first."""
    n_spike, n_calm = int(host.spike.sum()), int((~host.spike).sum())
    acc: dict[int, list] = {}
    for t, is_spike in zip(host.end, host.spike):
        for p in rows.get(float(t), []) or []:
            if isinstance(p, dict) and "pid" in p:
                entry = acc.setdefault(int(p["pid"]), [str(p.get("comm", "?")), 0.0, 0.0])
                entry[1 if is_spike else 2] += float(p.get("cpu_cores") or 0.0)
    out = [
        {
            "pid": pid,
            "comm": comm,
            "cpu_cores_spikes": round(s / n_spike, 3) if n_spike else 0.0,
            "cpu_cores_calm": round(c / n_calm, 3) if n_calm else 0.0,
        }
        for pid, (comm, s, c) in acc.items()
    ]
    return sorted(out, key=lambda p: -p["cpu_cores_spikes"])


def spiking(processes: list[dict]) -> list[dict]:
    """The processes that took clearly more CPU in the spikes than in the calm."""
    out = [
        p
        for p in processes
        if p["cpu_cores_spikes"] >= SPIKING_LIFT * p["cpu_cores_calm"]
        and p["cpu_cores_spikes"] - p["cpu_cores_calm"] >= SPIKING_EXTRA
    ]
    return sorted(out, key=lambda p: -(p["cpu_cores_spikes"] - p["cpu_cores_calm"]))
