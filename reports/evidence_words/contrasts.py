"""Sentences for the three ways the triage contrasts: the tail's requests against the body's (what
each lived through, analyzers/triage/exposure.py), the spike windows against the calm (the probes'
figures that moved, and the processes that took the CPU), and a condition that held through a
whole level, where there is nothing to contrast with (analyzers/triage/throughout.py)."""

from __future__ import annotations

import re
from typing import Any

from analyzers.triage.fleet.imbalance import SLOT_WAIT
from reports.evidence_words.phrasing import figure_name, figure_value, number, seconds


def differential_sentences(ev: dict, metric: str) -> list[str]:
    tail, exposed, body = number(ev, "tail_requests"), number(ev, "tail_exposed"), number(ev, "body_exposed")
    if tail is None or exposed is None or body is None:
        return []
    lived = "were long prompts" if "long_prompt_share" in ev else "lived through it"  # a property, not a time
    if "busier_share" in ev:  # p99.fleet.imbalance: the exposure it named (analyzers/triage/fleet/imbalance.py)
        lived = (
            "waited for a slot on a full replica while another had one free"
            if ev.get("exposure") == SLOT_WAIT
            else "were sent to a clearly busier replica"
        )
    # A hot replica's shares of the tail and of the requests (fleet_sentences) say it already.
    out = (
        []
        if "replica_shares" in ev
        else [
            f"{round(exposed * tail)} of the {tail:.0f} slowest requests {lived}, "
            f"against {body:.0%} of the other requests"
        ]
    )
    with_s, without_s = number(ev, "percentile_with_s"), number(ev, "percentile_without_s")
    q, level = number(ev, "counterfactual_quantile"), ev.get("counterfactual_level")
    if with_s is not None and without_s is not None and level and q is not None:
        out.append(
            f"without it, {level}'s {metric.upper()} P{q:g} would be {seconds(without_s)} instead of {seconds(with_s)}"
        )
    return out


# A figure measured on both sides: "<name>_spikes" / "<name>_calm", with its unit last.
SIDE = re.compile(r"^(?P<name>.+?)_(?:in_)?(?P<side>spikes|calm)(?P<unit>_lt_s|_gt_s|_s|_pct|_bytes|_ms)?$")
MIN_CONTRAST = 0.1  # a figure that moved less than this between spikes and calm is no evidence


def _contrast(spikes: Any, calm: Any) -> float:
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (spikes, calm)):
        return 1.0  # a bound ("< 300 ms"): say it
    top = max(abs(spikes), abs(calm))
    return abs(spikes - calm) / top if top else 0.0


def spikes_vs_calm_sentences(ev: dict, metric: str) -> list[str]:
    """The figures measured in the spike windows and in the calm that differ, most different first."""
    pairs: dict[str, dict[str, Any]] = {}
    for key, v in ev.items():
        m = SIDE.match(key)
        if m and v is not None:
            pairs.setdefault(m["name"] + (m["unit"] or ""), {})[m["side"]] = v
    both = [
        (k, p)
        for k, p in pairs.items()
        if {"spikes", "calm"} <= p.keys() and _contrast(p["spikes"], p["calm"]) >= MIN_CONTRAST
    ]
    both.sort(key=lambda kp: -_contrast(kp[1]["spikes"], kp[1]["calm"]))
    out, seen = _neighbours(ev.get("top_others_spikes") or []), set()
    for k, p in both:
        said = (figure_value(k, p["spikes"]), figure_value(k, p["calm"]))
        if said not in seen:  # two names for one figure (others, other): say it once
            seen.add(said)
            out.append(f"{figure_name(k)}: {said[0]} in the spike windows, {said[1]} in the calm")
    return out


def _neighbours(top: list) -> list[str]:
    """The processes that took CPU in the spike windows: "burner (pid 4242) 0.53 cores vs 0 in the calm"."""
    named = []
    for p in top[:3]:
        if isinstance(p, dict) and {"comm", "pid"} <= p.keys():
            spikes, calm = p.get("cpu_cores_spikes", p.get("cpu_cores")), p.get("cpu_cores_calm")
            named.append(
                f"{p['comm']} (pid {p['pid']})"
                + (f" {spikes:.2g} cores" if spikes is not None else "")
                + (f" vs {calm:.2g} in the calm" if calm is not None else "")
            )
    return ["in the spike windows the CPU went to " + "; ".join(named)] if named else []


def condition_sentences(ev: dict, metric: str) -> list[str]:
    """How much of the condition there was, for findings that rest on a condition in time."""
    out = []
    cores, wait = number(ev, "neighbour_cores_throughout"), number(ev, "waited_share_throughout")
    if cores is not None:
        whose = "the server's threads" if ev.get("waited_field") == "server_cpu_wait_share" else "some task"
        out.append(
            f"other processes held {cores:.2g} cores"
            + (f", and {whose} waited for a CPU {wait:.0%} of the time" if wait is not None else "")
        )
    for key, seconds_key, what in (
        ("retrans_throughout", None, "TCP segments were retransmitted on the target's connections"),
        ("retrans_when_held", "retrans_seconds", "TCP segments were retransmitted on the target's connections"),
        ("preemptions_when_held", "preemption_seconds", "requests were preempted"),
    ):
        n = number(ev, key)
        if n is not None:
            span = number(ev, seconds_key) if seconds_key else None
            out.append(f"{n:.0f} {what}" + (f" in {span:.0f} s" if span is not None else ""))
    return out
