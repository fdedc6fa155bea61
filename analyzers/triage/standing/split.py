"""A standing level's latency split into parts (queue, prefill, decode, time outside the server;
analyzers/triage/phases.py measures them), the part that dominates, and how a part's time is said."""

from __future__ import annotations

from analyzers.triage.phases import LevelPhases

NOT_SPLIT = "ttft (not split: no server histograms)"


def phase_parts(metric: str, ph: LevelPhases) -> dict[str, float]:
    if metric == "ttft":
        return ph.ttft_parts()
    if metric == "e2e":
        return ph.e2e_parts()
    return {"decode": ph.decode_mean_s}


def dominant_part(parts: dict[str, float]) -> tuple[str, float, float]:
    total = sum(parts.values()) or 1e-12
    name = max(parts, key=lambda k: parts[k])
    return name, parts[name], parts[name] / total


def duration(s: float | None) -> str:
    return "?" if s is None else (f"{1e3 * s:.0f} ms" if s < 10 else f"{s:.1f} s")
