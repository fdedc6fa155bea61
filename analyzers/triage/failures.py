"""P99 check: the tail made of requests that failed.

A request sent in a level's window that failed has no latency to report: under docs/metrics.md's
rules its TTFT (no first token) or TPOT and E2E (cut off after it) is +inf, so it sits at the top
of the level's distribution. In a level of n requests the P99 tail is its slowest
max(1, ceil(0.01 n)); f failed requests fill min(f, tail) of it. The share of the run's tail that
failures explain is that, summed over levels, over the summed tails: attribution by what each
request lived through (it failed), not a threshold. A level stopped during its warm-up (its first
requests all failed) is judged on what it sent then. The finding names the kinds (cut off by the
server, timed out, refused, ...) with a sample of the server's own words, and what to do for the
commonest kind.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from analyzers.triage.contracts import CheckResult, Finding, failed, passed
from rundir.table import RequestTable

FAIL_ID, FAIL_TITLE = "p99.failures", "failed requests are not the tail"
TAIL_Q = 0.99
FAILED_STATUSES = ("error", "timeout")

WORDS = {
    "cut_off": "cut off by the server",
    "timeout": "timed out",
    "http_status": "refused with an HTTP error",
    "connect": "could not connect",
    "stream_broken": "broken mid-stream",
    "bad_payload": "answered with bad payload",
}
NEXT = {
    "cut_off": (
        "the server ended streams without a finish_reason: a server that interrupts a running request "
        "when a new one arrives (llama-cpp-python's server does by default: --interrupt_requests False), "
        "a proxy's stream timeout, or a crash; the server's log says which"
    ),
    "timeout": "requests outlived --request-timeout: the load is beyond capacity, or the server stalled (see the "
    "standing and stall findings); raise the timeout only if such latencies are acceptable",
    "http_status": "the server refused requests: read the error samples (rate limits, queue full, context length)",
    "connect": "the server refused connections or was down: its process, its connection limit, the port",
    "stream_broken": "streams broke mid-answer: the server's log, a proxy in between, or resets on the network",
    "bad_payload": "the server answered something that is not an OpenAI stream: its version and endpoint",
}


def is_consequence_of_load(finding: Finding) -> bool:
    """Timeouts are what an overloaded server does to requests: then the load is the cause."""
    return finding.check_id == FAIL_ID and finding.evidence.get("dominant_kind") == "timeout"


def counted_failures(table: RequestTable) -> tuple[np.ndarray, np.ndarray]:
    """(counted, failed): the requests each level's tail is counted over, and which of them failed."""
    df = table.df
    status = df["status"].to_numpy(object)
    levels = df["level_id"].to_numpy(object)
    sent = status != "cancelled"
    counted = df["in_window"].to_numpy(bool) & sent
    # A level stopped before its window opened (its first requests all failed) measured nothing in
    # it: what it sent during the warm-up is then all there is, and the failures are the story.
    for level in set(levels[sent]) - set(levels[counted]):
        counted |= sent & (levels == level)
    return counted, counted & np.isin(status, FAILED_STATUSES)


def tail_filled(table: RequestTable, counted: np.ndarray, failures: np.ndarray) -> tuple[int, int]:
    """(the levels' summed P99 tails, how many of their places the `failures` fill): per level,
    min(its tail, its failures)."""
    levels = table.df["level_id"].to_numpy(object)
    tail_total = explained = 0
    for level in dict.fromkeys(levels[counted]):
        mine = counted & (levels == level)
        tail = max(1, math.ceil(round((1.0 - TAIL_Q) * int(mine.sum()), 9)))  # 0.01 * 1000 is 10.000000000000002
        tail_total += tail
        explained += min(tail, int((failures & mine).sum()))
    return tail_total, explained


def failure_kinds(table: RequestTable, failures: np.ndarray) -> tuple[Counter, str]:
    """The `failures`' kinds counted, and the words of one of the commonest kind."""
    df = table.df
    status = df["status"].to_numpy(object)[failures]
    error_kinds = df["error_kind"].to_numpy(object)[failures]
    kinds = Counter(_kind(k, s) for k, s in zip(error_kinds, status))
    top_kind, _ = kinds.most_common(1)[0]
    sample = next(
        (
            e
            for e, k, s in zip(df["error"].to_numpy(object)[failures], error_kinds, status)
            if _kind(k, s) == top_kind and isinstance(e, str)
        ),
        "",
    )
    return kinds, sample


def kinds_words(kinds: Counter) -> str:
    return ", ".join(f"{c} {WORDS.get(k, k)}" for k, c in kinds.most_common())


def check_failures(table: RequestTable, metric: str) -> CheckResult:
    counted, failures = counted_failures(table)
    if not failures.any():
        return passed(FAIL_ID, "server", FAIL_TITLE, "no request sent in a measured window failed")
    tail_total, explained = tail_filled(table, counted, failures)
    kinds, sample = failure_kinds(table, failures)
    top_kind, _ = kinds.most_common(1)[0]
    n_failed, n = int(failures.sum()), int(counted.sum())
    what = kinds_words(kinds)
    share = explained / tail_total if tail_total else 0.0
    title = (
        f"{n_failed} of {n} requests failed ({what}): a failed request's {metric.upper()} is unbounded, so "
        f"they are {share:.0%} of the tail"
    )
    finding = Finding(
        FAIL_ID,
        "server",
        "high",
        title,
        {
            "failed": n_failed,
            "requests": n,
            "by_kind": dict(kinds),
            "dominant_kind": top_kind,
            "sample_error": sample[:200],
            "tail_requests": tail_total,
            "tail_failed": explained,
        },
        explains=[],
        spike_windows=0,
        next_step=NEXT.get(top_kind, NEXT["stream_broken"]),
        kind="differential",
        tail_share=share,
    )
    return failed(finding, FAIL_TITLE, title)


def _kind(error_kind, status) -> str:
    if isinstance(error_kind, str):
        return error_kind
    return "timeout" if status == "timeout" else "stream_broken"
