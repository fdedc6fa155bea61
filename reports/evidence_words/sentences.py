"""A finding's evidence sentences put together: where it lies, then up to three sentences of numbers
from the builders in the order below, then the next step.

Each sentence builder reads the keys it knows and returns None when they are absent, so a finding
of any check gets the sentences its evidence supports, in the order below; keys none of them
knows are named with their values in one last sentence when fewer than two were made.
"""

from __future__ import annotations

import re
from typing import Callable

from reports.evidence_words.contrasts import (
    SIDE,
    condition_sentences,
    differential_sentences,
    spikes_vs_calm_sentences,
)
from reports.evidence_words.fleet import fleet_sentences, router_sentences
from reports.evidence_words.host import burst_sentences, client_lag_sentences, host_sentences
from reports.evidence_words.phrasing import figure_name, figure_value, sentence
from reports.evidence_words.server import (
    failure_sentences,
    long_prompt_sentences,
    phase_sentences,
    server_sentences,
)
from reports.evidence_words.where import where_sentence

MAX_NUMBER_SENTENCES = 3  # plus where it lies and the next step: five lines at most


BUILDERS: list[Callable[[dict, str], list[str]]] = [
    failure_sentences,
    fleet_sentences,
    router_sentences,
    condition_sentences,
    differential_sentences,
    phase_sentences,
    server_sentences,
    host_sentences,
    client_lag_sentences,
    burst_sentences,
    spikes_vs_calm_sentences,
    long_prompt_sentences,
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
        and not SIDE.match(k)
        and isinstance(v, (int, float, str))
        and not isinstance(v, bool)
        and v != ""
    ]
    return (
        ["also measured: " + ", ".join(f"{figure_name(k)} {figure_value(k, v)}" for k, v in rest[:3])] if rest else []
    )


def evidence_sentences(finding: dict, metric: str = "ttft") -> list[str]:
    """Three to five sentences: where the finding lies, the numbers behind it, the next step.
    `finding` is a Finding as diagnosis_p99.json holds it (its dict, with "coverage")."""
    ev = finding.get("evidence") or {}
    said: list[str] = []
    for build in BUILDERS:
        said += build(ev, metric)
    if len(said) < 2:
        said += _others(ev, metric)
    out = [where_sentence(finding, metric)] + [sentence(s) for s in said[:MAX_NUMBER_SENTENCES]]
    if finding.get("next_step"):
        out.append(sentence(f"next: {finding['next_step']}"))
    return out
