"""A P99 finding's evidence as three to five sentences a person reads, with units: where it lies in
the tail, up to three sentences of the numbers behind it, and the next step. The analyzers return
the numbers (analyzers/triage/contracts.py, Finding.evidence); the words are here. Every number
stays in diagnosis_p99.json and the report's Diagnosis table (reports/evidence_units.py).

Each sentence builder reads the keys it knows and returns None when they are absent, so a finding
of any check gets the sentences its evidence supports, in the order below; keys none of them
knows are named with their values in one last sentence when fewer than two were made.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from reports.evidence_units import evidence_name, fmt_evidence

MAX_NUMBER_SENTENCES = 3  # plus where it lies and the next step: five lines at most


def seconds(v: float) -> str:
    """A duration as a person says it: 7 ms, 412 ms, 2.63 s, 38 s."""
    if v < 0.01:
        return f"{v * 1000:.2g} ms"
    if v < 1:
        return f"{v * 1000:.0f} ms"
    return f"{v:.3g} s"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


def _num(ev: dict, key: str) -> float | None:
    v = ev.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def where_sentence(finding: dict, metric: str) -> str:
    """The part of the tail the finding lies in: spike windows, standing levels, or tail requests."""
    explains = len(finding.get("explains") or [])
    n = int(finding.get("spike_windows") or 0)
    share = finding.get("coverage")
    held = f" ({share:.0%} of the tail requests)" if isinstance(share, (int, float)) else ""
    kind = finding.get("kind", "spike")
    if kind == "standing":
        levels = ", ".join((finding.get("evidence") or {}).get("levels") or []) or _plural(explains, "level")
        return _sentence(f"it explains the standing {metric.upper()} tail of {levels}{held}")
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
        return _sentence(
            f"it held through the whole of {levels}{held}: no stretch of the run without it to compare with{also}"
        )
    if kind == "added":  # a router's time (analyzers/triage/fleet/router.py)
        return _sentence(
            f"it is {share:.0%} of what the slowest {metric.upper()} requests waited: time spent on "
            "the way to the replicas"
            if isinstance(share, (int, float))
            else "it is time spent on the way to the replicas"
        )
    if kind == "differential" or not n:
        return _sentence(
            f"it explains {share:.0%} of the {metric.upper()} tail requests"
            if isinstance(share, (int, float))
            else f"it is a condition of the {metric.upper()} tail"
        )
    return _sentence(f"it coincides with {explains} of the {_plural(n, 'spike window')}{held}")


def _failures(ev: dict, metric: str) -> list[str]:
    failed, n = _num(ev, "failed"), _num(ev, "requests")
    if failed is None or n is None:
        return []
    kinds = ev.get("by_kind") or {}
    how = ", ".join(f"{c} {k.replace('_', ' ')}" for k, c in kinds.items())
    who = (
        f"replica {ev['replica']} failed {failed:.0f} of its {n:.0f} requests"
        if ev.get("replica")
        else f"{failed:.0f} of {n:.0f} requests failed"
    )
    rate = _num(ev, "others_failure_rate")
    out = [
        who + (f" ({how})" if how else "") + (f", the other replicas {rate:.1%} of theirs" if rate is not None else "")
    ]
    if ev.get("sample_error"):
        out.append(f"one of them said: {ev['sample_error']}")
    return out


def _differential(ev: dict, metric: str) -> list[str]:
    tail, exposed, body = _num(ev, "tail_requests"), _num(ev, "tail_exposed"), _num(ev, "body_exposed")
    if tail is None or exposed is None or body is None:
        return []
    lived = "were long prompts" if "long_prompt_share" in ev else "lived through it"  # a property, not a time
    if "busier_share" in ev:
        lived = "were sent to a clearly busier replica"
    # A hot replica's shares of the tail and of the requests (_fleet) say it already.
    out = (
        []
        if "replica_shares" in ev
        else [
            f"{round(exposed * tail)} of the {tail:.0f} slowest requests {lived}, "
            f"against {body:.0%} of the other requests"
        ]
    )
    with_s, without_s = _num(ev, "percentile_with_s"), _num(ev, "percentile_without_s")
    q, level = _num(ev, "counterfactual_quantile"), ev.get("counterfactual_level")
    if with_s is not None and without_s is not None and level and q is not None:
        out.append(
            f"without it, {level}'s {metric.upper()} P{q:g} would be {seconds(without_s)} instead of {seconds(with_s)}"
        )
    return out


def _fleet(ev: dict, metric: str) -> list[str]:
    """A hot replica: its shares of the tail and of the requests, its latency at the same load; a
    routing imbalance: what the tail's replicas held against the lightest one (analyzers/triage/fleet/)."""
    replica, shares, ratio = ev.get("replica"), ev.get("replica_shares") or {}, _num(ev, "latency_vs_others_same_load")
    out = []
    if replica is not None and replica in shares and ratio is not None:
        mine = shares[replica]
        out.append(
            f"replica {replica} served {mine['tail_share']:.0%} of the tail and {mine['request_share']:.0%} "
            "of the requests"
        )
        its, theirs = _num(ev, "latency_median_s"), _num(ev, "others_latency_median_s")
        n, m = _num(ev, "in_flight_median"), _num(ev, "others_in_flight_median")
        medians = (
            f" (median {seconds(its)} with {n:.0f} in flight, theirs {seconds(theirs)} with {m:.0f})"
            if its is not None and theirs is not None and n is not None and m is not None
            else ""
        )
        residence = _num(ev, "residence_per_work_vs_others")
        if ev.get("slowness_from") == "residence" and residence is not None:
            # Judged by Little's law (analyzers/triage/fleet/hot_replica.py): its loads and the others' did not meet.
            out.append(
                f"sent no more requests and no heavier ones, each stayed on it {residence:.1f}x as long as "
                f"the others' did on theirs{medians}; at the loads the others had, {ratio:.1f}x"
            )
        else:
            out.append(f"at the same load its {metric.upper()} was {ratio:.1f}x the other replicas'{medians}")
    own, light = _num(ev, "tail_own_outstanding_median"), _num(ev, "tail_lightest_outstanding_median")
    if own is not None and light is not None:
        held = (
            f"{ev['tail_own_in_flight_median']:.0f} requests and "
            if _num(ev, "tail_own_in_flight_median") is not None
            else ""
        )
        light_held = (
            f"{ev['tail_lightest_in_flight_median']:.0f} and "
            if _num(ev, "tail_lightest_in_flight_median") is not None
            else ""
        )
        out.append(
            f"the slowest requests went to a replica holding {held}{own:,.0f} outstanding tokens (median) "
            f"while another held {light_held}{light:,.0f}"
            + (f", as {ev['routing']} chose" if ev.get("routing") else "")
        )
    return out


def _phases(ev: dict, metric: str) -> list[str]:
    parts = {k: v for k, v in (ev.get("parts_s") or {}).items() if isinstance(v, (int, float))}
    if not parts:
        return []
    levels = ", ".join(ev.get("levels") or []) or "the slow levels"
    split = ", ".join(f"{k} {seconds(v)}" for k, v in parts.items())
    largest = f"; {ev['dominant_part']} is the largest part" if ev.get("dominant_part") and len(parts) > 1 else ""
    return [
        f"in {levels}, a request's mean {metric.upper()} of {seconds(sum(parts.values()))} splits into {split}{largest}"
    ]


def _server(ev: dict, metric: str) -> list[str]:
    s = ev.get("server") or {}
    running, waiting = _num(s, "running_mean"), _num(s, "waiting_mean")
    if running is None and waiting is None:
        return []
    words = []
    if running is not None:
        top = _num(s, "running_max")
        words.append(f"{running:.1f} requests running" + (f" (at most {top:.0f})" if top is not None else ""))
    if waiting is not None:
        words.append(f"{waiting:.1f} waiting")
    kv, pre = _num(s, "kv_usage_max"), _num(s, "preemptions")
    kv_words = (f"; the KV cache peaked at {kv:.0%} full" if kv is not None else "") + (
        f", with {_plural(int(pre), 'preemption')}" if kv is not None and pre is not None else ""
    )
    return ["the server had " + " and ".join(words) + " on average" + kv_words]


def _host(ev: dict, metric: str) -> list[str]:
    h = ev.get("host") or {}
    busy, cores = _num(h, "cpu_pct"), _num(h, "cores")
    if busy is None:
        return []
    who = [
        f"the server {h['server_cpu_cores']:.2g} cores" if _num(h, "server_cpu_cores") is not None else "",
        f"other processes {h['others_cpu_cores']:.2g}" if _num(h, "others_cpu_cores") is not None else "",
    ]
    used = ", ".join(w for w in who if w)
    return [
        f"the host's CPU was {busy:.0f}% busy"
        + (f" over {cores:.0f} cores" if cores else "")
        + (f" ({used})" if used else "")
    ]


def _client_lag(ev: dict, metric: str) -> list[str]:
    lag, limit = _num(ev, "send_lag_p99_s"), _num(ev, "limit_s")
    if lag is None:
        return []
    late, spikes = _num(ev, "spikes_sent_late"), _num(ev, "spikes")
    return [
        f"the load generator sent requests {seconds(lag)} late at P99"
        + (f", over its limit of {seconds(limit)}" if limit is not None else "")
        + (f"; {late:.0f} of the {spikes:.0f} spike requests left late" if late is not None and spikes else "")
    ]


def _bursts(ev: dict, metric: str) -> list[str]:
    n, judged = _num(ev, "burst_streams"), _num(ev, "burst_judged")
    if n is None or judged is None:
        return []
    where = ", ".join(ev.get("levels") or [])
    return [
        f"{n:.0f} of the {judged:.0f} streams judged arrived in one burst"
        + (f" (in {where})" if where else "")
        + ": the client read them late, so their latencies are its own"
    ]


_SIDE = re.compile(r"^(?P<name>.+?)_(?:in_)?(?P<side>spikes|calm)(?P<unit>_lt_s|_gt_s|_s|_pct|_bytes|_ms)?$")


# What a figure is called in a sentence, where its key's words would not say it.
NAMES = {
    "retrans": "TCP retransmitted segments",
    "retrans_per_s": "TCP retransmits",
    "cpu_pct": "the host's CPU",
    "busiest_core_cpu_pct": "the busiest core",
    "server_cpu_cores": "the server's CPU (cores)",
    "client_cpu_cores": "the load generator's CPU (cores)",
    "others_cpu_cores": "all other processes' CPU (cores)",
    "other_cpu_cores": "other processes' CPU (cores)",
    "waiting_mean": "requests waiting (mean)",
    "queue_time_mean_s": "the server's mean queue time",
    "queue_time_p99_s": "the server's queue-time P99",
    "queue_time_p99_lt_s": "the server's queue-time P99",
    "queue_time_p99_gt_s": "the server's queue-time P99",
    "preemptions": "preemptions",
    "preemptions_per_s": "preemptions",
    "throttled_share": "GPU samples throttled",
    "ncpu": "CPUs",
    "cores": "cores",
    "busiest_core": "the busiest core (cpu)",
}
MIN_CONTRAST = 0.1  # a figure that moved less than this between spikes and calm is no evidence


def _value(key: str, v: Any) -> str:
    per_s = "_per_s" in key
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if key.endswith("_s") and not key.endswith(("_lt_s", "_gt_s", "_per_s")) and v >= 0:
            return seconds(v)
        if per_s or not key.endswith(("_pct", "_bytes", "_ms", "_lt_s", "_gt_s", "_share", "_ratio", "_rate", "_frac")):
            text = f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
            return text + ("/s" if per_s else "")
    return fmt_evidence(key, v)


def _name(key: str) -> str:
    return NAMES.get(key) or evidence_name(key.replace("_per_s", "_per_second"))


def _contrast(spikes: Any, calm: Any) -> float:
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (spikes, calm)):
        return 1.0  # a bound ("< 300 ms"): say it
    top = max(abs(spikes), abs(calm))
    return abs(spikes - calm) / top if top else 0.0


def _spikes_vs_calm(ev: dict, metric: str) -> list[str]:
    """The figures measured in the spike windows and in the calm that differ, most different first."""
    pairs: dict[str, dict[str, Any]] = {}
    for key, v in ev.items():
        m = _SIDE.match(key)
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
        said = (_value(k, p["spikes"]), _value(k, p["calm"]))
        if said not in seen:  # two names for one figure (others, other): say it once
            seen.add(said)
            out.append(f"{_name(k)}: {said[0]} in the spike windows, {said[1]} in the calm")
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


def _condition(ev: dict, metric: str) -> list[str]:
    """How much of the condition there was, for findings that rest on a condition in time."""
    out = []
    cores, wait = _num(ev, "neighbour_cores_throughout"), _num(ev, "waited_share_throughout")
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
        n = _num(ev, key)
        if n is not None:
            span = _num(ev, seconds_key) if seconds_key else None
            out.append(f"{n:.0f} {what}" + (f" in {span:.0f} s" if span is not None else ""))
    return out


def _router(ev: dict, metric: str) -> list[str]:
    """Each level where the router's gap was found: the client's TTFT mean against the replicas' own."""
    levels = ev.get("levels")
    if not isinstance(levels, dict):  # a standing finding's levels are a list of ids
        return []
    out = []
    for level in ev.get("router_levels") or []:
        g = levels.get(level) or {}
        client, own, gap, rtt = (_num(g, k) for k in ("client_ttft_mean_s", "replicas_ttft_mean_s", "gap_s", "rtt_s"))
        if client is not None and own is not None and gap is not None:
            trip = f", less the {seconds(rtt)} round trip to the router" if rtt is not None else ""
            out.append(
                f"in {level} the client's TTFT mean was {seconds(client)} and the replicas' own "
                f"{seconds(own)}{trip}: {seconds(gap)} in the router"
            )
    return out[:2]


def _long_prompts(ev: dict, metric: str) -> list[str]:
    n, tokens = _num(ev, "long_prompts"), _num(ev, "long_prompt_tokens_median")
    if n is None or tokens is None:
        return []
    return [f"{_plural(int(n), 'long prompt')} of about {tokens:,.0f} tokens (median) shared the server"]


BUILDERS: list[Callable[[dict, str], list[str]]] = [
    _failures,
    _fleet,
    _router,
    _condition,
    _differential,
    _phases,
    _server,
    _host,
    _client_lag,
    _bursts,
    _spikes_vs_calm,
    _long_prompts,
]
KNOWN = re.compile(
    r"^(failed|requests|by_kind|dominant_kind|sample_error|tail_\w+|body_\w+|relative_risk|"
    r"exposed_latency_vs_unexposed|counterfactual_\w+|percentile_\w+|parts_s|levels|dominant_part|"
    r"server|host|limits|send_lag_p99_s|limit_s|spikes_sent_late|spikes|long_prompt\w*|burst_\w+|"
    r"neighbour_\w+|waited_\w+|throughout_levels|baseline_lived_through_it|retrans_\w+|preemption\w*|rto_\w+|"
    r"replica\w*|latency_vs_others_same_load|same_load_\w+|residence_\w+|slowness_from|in_flight_median|others_\w+|latency_median_s|"
    r"busier_share|typical_request_tokens|output_tokens_p99_over_median|routing|by_replica|failure_rate|"
    r"router\w*|levels_not_judged)$"
)


def _others(ev: dict, metric: str) -> list[str]:
    """The figures no builder speaks of, named with their units (at most three)."""
    rest = [
        (k, v)
        for k, v in ev.items()
        if not KNOWN.match(k)
        and not _SIDE.match(k)
        and isinstance(v, (int, float, str))
        and not isinstance(v, bool)
        and v != ""
    ]
    return ["also measured: " + ", ".join(f"{_name(k)} {_value(k, v)}" for k, v in rest[:3])] if rest else []


def evidence_sentences(finding: dict, metric: str = "ttft") -> list[str]:
    """Three to five sentences: where the finding lies, the numbers behind it, the next step.
    `finding` is a Finding as diagnosis_p99.json holds it (its dict, with "coverage")."""
    ev = finding.get("evidence") or {}
    said: list[str] = []
    for build in BUILDERS:
        said += build(ev, metric)
    if len(said) < 2:
        said += _others(ev, metric)
    out = [where_sentence(finding, metric)] + [_sentence(s) for s in said[:MAX_NUMBER_SENTENCES]]
    if finding.get("next_step"):
        out.append(_sentence(f"next: {finding['next_step']}"))
    return out
