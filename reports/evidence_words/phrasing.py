"""The words every evidence sentence shares: a duration as a person says it, a count with its noun,
a sentence's capital and full stop, a number read from an evidence dict, and a figure's name and
value with the unit its key names (reports/evidence_units.py for the units)."""

from __future__ import annotations

from typing import Any

from reports.evidence_units import evidence_name, fmt_evidence


def seconds(v: float) -> str:
    """A duration as a person says it: 7 ms, 412 ms, 2.63 s, 38 s."""
    if v < 0.01:
        return f"{v * 1000:.2g} ms"
    if v < 1:
        return f"{v * 1000:.0f} ms"
    return f"{v:.3g} s"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


def number(ev: dict, key: str) -> float | None:
    v = ev.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


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


def figure_value(key: str, v: Any) -> str:
    per_s = "_per_s" in key
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if key.endswith("_s") and not key.endswith(("_lt_s", "_gt_s", "_per_s")) and v >= 0:
            return seconds(v)
        if per_s or not key.endswith(("_pct", "_bytes", "_ms", "_lt_s", "_gt_s", "_share", "_ratio", "_rate", "_frac")):
            text = f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
            return text + ("/s" if per_s else "")
    return fmt_evidence(key, v)


def figure_name(key: str) -> str:
    return NAMES.get(key) or evidence_name(key.replace("_per_s", "_per_second"))
