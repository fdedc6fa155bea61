"""The first sentence of a finding's evidence: the part of the tail it lies in (spike windows,
standing levels, tail requests, a condition held throughout, a router's added time)."""

from __future__ import annotations

from reports.evidence_words.phrasing import plural, sentence


def where_sentence(finding: dict, metric: str) -> str:
    """The part of the tail the finding lies in: spike windows, standing levels, or tail requests."""
    explains = len(finding.get("explains") or [])
    n = int(finding.get("spike_windows") or 0)
    share = finding.get("coverage")
    held = f" ({share:.0%} of the tail requests)" if isinstance(share, (int, float)) else ""
    kind = finding.get("kind", "spike")
    if kind == "standing":
        levels = ", ".join((finding.get("evidence") or {}).get("levels") or []) or plural(explains, "level")
        return sentence(f"it explains the standing {metric.upper()} tail of {levels}{held}")
    if kind == "throughout":
        levels = ", ".join((finding.get("evidence") or {}).get("throughout_levels") or []) or "its levels"
        shared = ", ".join((finding.get("evidence") or {}).get("baseline_lived_through_it") or [])
        also = (
            (
                f"; the baseline lived through it too with no standing tail, so what {shared} added over the "
                "baseline is not its doing"
            )
            if shared
            else ""
        )
        return sentence(
            f"it held through the whole of {levels}{held}: no stretch of the run without it to compare with{also}"
        )
    if kind == "added":  # a router's time (analyzers/triage/fleet/router.py)
        return sentence(
            f"it is {share:.0%} of what the slowest {metric.upper()} requests waited: time spent on "
            "the way to the replicas"
            if isinstance(share, (int, float))
            else "it is time spent on the way to the replicas"
        )
    if kind == "differential" or not n:
        return sentence(
            f"it explains {share:.0%} of the {metric.upper()} tail requests"
            if isinstance(share, (int, float))
            else f"it is a condition of the {metric.upper()} tail"
        )
    return sentence(f"it coincides with {explains} of the {plural(n, 'spike window')}{held}")
