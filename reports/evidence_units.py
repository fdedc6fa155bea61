"""A P99 finding's evidence numbers with the unit each key names: `send_lag_p99_s` 0.08 reads
"send lag p99 80.0 ms". The report's Diagnosis table shows every key so; reports/evidence_words/
builds the few sentences the terminal and the answer show from the same numbers."""

from __future__ import annotations

_SHARE_SUFFIXES = ("_share", "_ratio", "_rate", "_frac")  # fractions, shown as %
_UNIT_SUFFIXES = ("_s", "_ms", "_pct", "_bytes") + _SHARE_SUFFIXES  # a key that says its own unit


# A bound, not a value: a server histogram quantile that fell in its first bucket is only known to
# be below that bucket's edge, one in the +Inf bucket above the last edge (docs/probes.md).
_BOUND_SUFFIXES = {"_lt_s": "< ", "_gt_s": "> "}


def evidence_name(key: str) -> str:
    """`send_lag_p99_s` -> "send lag p99" (the unit goes with the value)."""
    for suffix in (*_BOUND_SUFFIXES, "_s", "_bytes", "_pct", "_ms"):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
            break
    return key.replace("_", " ")


def fmt_evidence(key: str, v) -> str:
    """An evidence number with the unit its name says (…_s → ms, …_bytes → MiB, shares → %)."""
    if isinstance(v, dict):  # a breakdown: each part with its own unit
        return ", ".join(
            f"{evidence_name(str(k))} {fmt_evidence(str(k) if str(k).endswith(_UNIT_SUFFIXES) else key, x)}"
            for k, x in v.items()
            if x not in (None, "", [], {})
        )
    if isinstance(v, list):
        return ", ".join(_item(x) for x in v[:6]) + (f" (+{len(v) - 6} more)" if len(v) > 6 else "")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    bound = next((sign for suffix, sign in _BOUND_SUFFIXES.items() if key.endswith(suffix)), None)
    if bound is not None:  # a bucket edge: round, so "< 300 ms", not "< 300.0 ms"
        return bound + (f"{round(v * 1000, 3):g} ms" if abs(v) < 10 else f"{v:g} s")
    if key.endswith("_s"):
        if 0 < abs(v) < 1e-4:  # e.g. a server's 0.01 ms queue time, not "0.0 ms"
            return f"{v * 1000:.2g} ms"
        return f"{v * 1000:.1f} ms" if abs(v) < 10 else f"{v:.1f} s"
    if key.endswith("_ms"):
        return f"{v:.1f} ms"
    if key.endswith("_pct"):
        return f"{v:.0f}%"
    if key.endswith("_bytes"):
        return f"{v / 2**20:.1f} MiB"
    if key.endswith(_SHARE_SUFFIXES) and abs(v) <= 1:
        return f"{v:.1%}"
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _item(x) -> str:
    """A list item: a process as "comm (pid N) 0.08 cores", any other record as its fields, else the value."""
    if isinstance(x, dict) and {"comm", "pid"} <= x.keys():
        cores = x.get("cpu_cores")
        return f"{x['comm']} (pid {x['pid']})" + (f" {cores:.2f} cores" if isinstance(cores, (int, float)) else "")
    if isinstance(x, dict):
        return " ".join(f"{evidence_name(str(k))} {fmt_evidence(str(k), y)}" for k, y in x.items())
    return fmt_evidence("", x)
