"""P99 check: the failed requests of a fleet came from one replica (it failed, or restarted).

failures.py counts the failed requests into each level's P99 tail (a failed request's latency is
unbounded); this check asks where they came from, with the same counting. A replica is named when
it holds at least CONCENTRATED of the failures (MIN_FAILED or more) and fails its own requests at
least RATE_FACTOR times as often as the other replicas fail theirs. A request names its replica in
its record (the router's header, or the URL the client chose); a request the fleet front could not
place on a dead replica carries no header, but the front's error names it ("replica 1 (...) did
not answer", refengine/server/dp_front.py), and that is read too.

The finding explains the failures on that replica; the generic p99.failures finding keeps only the
rest of its share (narrow_failures), so one cause is not ranked twice.
"""

from __future__ import annotations

import re

import numpy as np

from analyzers.triage.contracts import CheckResult, Finding, failed, passed
from analyzers.triage.failures import FAIL_ID, counted_failures, failure_kinds, kinds_words, tail_filled
from analyzers.triage.fleet.load_at_send import replica_label, replica_names, replica_order
from rundir.table import RequestTable

REPLICA_FAIL_ID, REPLICA_FAIL_TITLE = "p99.fleet.replica-failures", "failed requests are not one replica's"
MIN_FAILED = 3
CONCENTRATED = 0.8  # of the failures on one replica ...
RATE_FACTOR = 3.0  # ... failing its requests at least this many times as often as the others fail theirs
_FRONT_WORDS = re.compile(r"\breplica (\d+)\b")


def failed_replica(table: RequestTable) -> np.ndarray:
    """Each row's replica: its record's, else the one the fleet front's error names (None: unknown)."""
    names = replica_names(table)
    errors = table.df["error"].to_numpy(object)
    for i in np.flatnonzero([n is None for n in names]):
        m = _FRONT_WORDS.search(errors[i]) if isinstance(errors[i], str) else None
        if m:
            names[i] = m.group(1)
    return names


def check_replica_failures(table: RequestTable, metric: str, urls: list[str] | None = None) -> CheckResult:
    counted, failures = counted_failures(table)
    if not failures.any():
        return passed(REPLICA_FAIL_ID, "fleet", REPLICA_FAIL_TITLE, "no request sent in a measured window failed")
    names = failed_replica(table)
    known = np.array([n is not None for n in names], dtype=bool)
    if not (failures & known).any():
        return passed(
            REPLICA_FAIL_ID,
            "fleet",
            REPLICA_FAIL_TITLE,
            f"none of the {int(failures.sum())} failed requests names its replica",
        )
    per = {
        name: (int((failures & (names == name)).sum()), int((counted & (names == name)).sum()))
        for name in sorted({n for n in names[counted & known]}, key=replica_order)
    }
    worst = max(per, key=lambda k: per[k][0])
    n_worst, sent_worst = per[worst]
    n_failed = int(failures.sum())
    others_failed = sum(f for k, (f, _) in per.items() if k != worst)
    others_sent = sum(s for k, (_, s) in per.items() if k != worst)
    rate = n_worst / sent_worst if sent_worst else 1.0
    others_rate = others_failed / others_sent if others_sent else 0.0
    by_replica = {k: {"failed": f, "requests": s} for k, (f, s) in per.items()}
    if n_worst < MIN_FAILED or n_worst < CONCENTRATED * n_failed or rate < RATE_FACTOR * others_rate:
        return passed(
            REPLICA_FAIL_ID,
            "fleet",
            REPLICA_FAIL_TITLE,
            f"the failures are spread: replica {worst} had {n_worst} of the {n_failed} "
            f"({rate:.1%} of its requests, the others {others_rate:.1%})",
            by_replica=by_replica,
        )
    mine = failures & (names == worst)
    tail_total, explained = tail_filled(table, counted, mine)
    kinds, sample = failure_kinds(table, mine)
    top_kind, _ = kinds.most_common(1)[0]
    share = explained / tail_total if tail_total else 0.0
    name = replica_label(worst, urls or [])
    title = (
        f"{name} failed {n_worst} of its {sent_worst} requests ({kinds_words(kinds)}) while the "
        f"others failed {others_failed} of {others_sent}: its failures are {share:.0%} of the "
        f"{metric.upper()} tail"
    )
    evidence = {
        "replica": worst,
        "failed": n_worst,
        "requests": sent_worst,
        "failure_rate": round(rate, 4),
        "others_failure_rate": round(others_rate, 4),
        "by_kind": dict(kinds),
        "dominant_kind": top_kind,
        "sample_error": sample[:200],
        "by_replica": by_replica,
        "tail_requests": tail_total,
        "tail_failed": explained,
    }
    finding = Finding(
        REPLICA_FAIL_ID,
        "fleet",
        "high",
        title,
        evidence,
        explains=[],
        spike_windows=0,
        next_step=(
            f"{name} failed or restarted: read its log and its process (exit code, "
            "OOM kill, health) around the failures; the fleet front routes around a replica "
            "whose /health fails, a client that drives the URLs itself does not"
        ),
        kind="differential",
        tail_share=share,
    )
    return failed(finding, REPLICA_FAIL_TITLE, title)


def narrow_failures(findings: list[Finding]) -> None:
    """The failures one replica explains leave the generic p99.failures finding's share."""
    fleet = next((f for f in findings if f.check_id == REPLICA_FAIL_ID), None)
    if fleet is None:
        return
    for f in findings:
        if f.check_id == FAIL_ID and f.tail_share is not None:
            f.tail_share = max(0.0, f.tail_share - (fleet.tail_share or 0.0))
