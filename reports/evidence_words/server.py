"""Sentences for what the server did: requests that failed (on one replica or all), a slow level's
latency split into queue, prefill and decode, its running and waiting requests and KV cache, and the
long prompts it shared."""

from __future__ import annotations

from reports.evidence_words.phrasing import number, plural, seconds


def failure_sentences(ev: dict, metric: str) -> list[str]:
    failed, n = number(ev, "failed"), number(ev, "requests")
    if failed is None or n is None:
        return []
    kinds = ev.get("by_kind") or {}
    how = ", ".join(f"{c} {k.replace('_', ' ')}" for k, c in kinds.items())
    who = (
        f"replica {ev['replica']} failed {failed:.0f} of its {n:.0f} requests"
        if ev.get("replica")
        else f"{failed:.0f} of {n:.0f} requests failed"
    )
    rate = number(ev, "others_failure_rate")
    out = [
        who + (f" ({how})" if how else "") + (f", the other replicas {rate:.1%} of theirs" if rate is not None else "")
    ]
    if ev.get("sample_error"):
        out.append(f"one of them said: {ev['sample_error']}")
    return out


def phase_sentences(ev: dict, metric: str) -> list[str]:
    parts = {k: v for k, v in (ev.get("parts_s") or {}).items() if isinstance(v, (int, float))}
    if not parts:
        return []
    levels = ", ".join(ev.get("levels") or []) or "the slow levels"
    split = ", ".join(f"{k} {seconds(v)}" for k, v in parts.items())
    largest = f"; {ev['dominant_part']} is the largest part" if ev.get("dominant_part") and len(parts) > 1 else ""
    return [
        f"in {levels}, a request's mean {metric.upper()} of {seconds(sum(parts.values()))} splits into {split}{largest}"
    ]


def server_sentences(ev: dict, metric: str) -> list[str]:
    s = ev.get("server") or {}
    running, waiting = number(s, "running_mean"), number(s, "waiting_mean")
    if running is None and waiting is None:
        return []
    words = []
    if running is not None:
        top = number(s, "running_max")
        words.append(f"{running:.1f} requests running" + (f" (at most {top:.0f})" if top is not None else ""))
    if waiting is not None:
        words.append(f"{waiting:.1f} waiting")
    kv, pre = number(s, "kv_usage_max"), number(s, "preemptions")
    kv_words = (f"; the KV cache peaked at {kv:.0%} full" if kv is not None else "") + (
        f", with {plural(int(pre), 'preemption')}" if kv is not None and pre is not None else ""
    )
    return ["the server had " + " and ".join(words) + " on average" + kv_words]


def long_prompt_sentences(ev: dict, metric: str) -> list[str]:
    n, tokens = number(ev, "long_prompts"), number(ev, "long_prompt_tokens_median")
    if n is None or tokens is None:
        return []
    return [f"{plural(int(n), 'long prompt')} of about {tokens:,.0f} tokens (median) shared the server"]
