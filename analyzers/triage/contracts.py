"""The contract of the P99 triage: each check returns a CheckResult, which may carry a Finding.

A check either could not run (no data: status "unchecked", with the reason), ran and found
nothing ("passed"), or found a cause ("failed", with a Finding). A Finding always carries the
numbers behind it and the spike windows it explains; nothing is reported without evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from analyzers.triage.tail_windows import Window

# "server": requests the server failed (they are the tail by definition); "fleet": which replica of a
# fleet, or which route, the tail came from (a replica's own causes come after); then the seed's
# order; then the measurement itself.
CATEGORIES = ("server", "fleet", "network", "scheduling", "host", "client")
SEVERITIES = ("high", "medium", "low")
KINDS = ("spike", "standing", "differential", "throughout", "added")
OWN_SHARE = ("differential", "added")  # kinds that measure their own share of the tail
STATUSES = ("failed", "passed", "unchecked")


@dataclass
class Finding:
    check_id: str  # the playbook step this check automates, e.g. "p99.sched.long-prefill"
    category: str
    severity: str
    title: str  # one line, plain words
    evidence: dict[str, Any]  # the numbers behind it
    explains: list[Window]  # spike windows where the evidence coincides
    spike_windows: int  # spike windows in this check's scope (e.g. those of short requests)
    next_step: str  # what to do or look at next
    # "spike": tied to spike windows; "standing": a level slow throughout; "differential": a condition
    # that separates the tail from the body, request by request (analyzers/triage/exposure.py);
    # "throughout": a condition that held for whole levels (analyzers/triage/throughout.py); "added":
    # time added to every request on the way (a router's, analyzers/triage/fleet/router.py)
    kind: str = "spike"
    # Share of the run's tail requests (spikes and standing-tail requests) whose own latency window
    # overlaps `explains`: what ranking orders by. Set by the triage once every check has run; a
    # differential finding brings its own (the share of the tail it explains, attributable).
    tail_share: float | None = None

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"category must be one of {CATEGORIES}, got {self.category!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if not self.evidence:
            raise ValueError(f"finding {self.check_id} has no evidence")

    @property
    def coverage(self) -> float:
        """Share of the tail this finding explains (of its spike windows until tail_share is set)."""
        if self.tail_share is not None:
            return self.tail_share
        return len(self.explains) / self.spike_windows if self.spike_windows else 0.0


@dataclass
class CheckResult:
    check_id: str
    category: str
    title: str  # what was checked
    status: str
    detail: str  # why it passed, failed, or could not be checked
    finding: Finding | None = None
    numbers: dict[str, Any] = field(default_factory=dict)
    context: str | None = None  # what was seen that is not the target's problem (host-wide counters ...)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if (self.status == "failed") != (self.finding is not None):
            raise ValueError(f"check {self.check_id}: a finding goes with status 'failed' and only with it")


def unchecked(check_id: str, category: str, title: str, why: str) -> CheckResult:
    return CheckResult(check_id, category, title, "unchecked", why)


def passed(
    check_id: str, category: str, title: str, why: str, context: str | None = None, **numbers: Any
) -> CheckResult:
    return CheckResult(check_id, category, title, "passed", why, numbers=numbers, context=context)


def failed(finding: Finding, title: str, detail: str) -> CheckResult:
    return CheckResult(
        finding.check_id, finding.category, title, "failed", detail, finding=finding, numbers=dict(finding.evidence)
    )


COVERAGE_STEP = 0.1  # coverages this close are a tie, broken by the seed's order
CONTEXT_SHARE = 0.2  # a finding explaining less of the tail than this is context, not a cause


def rank(findings: list[Finding]) -> list[Finding]:
    """The one that explains more of the tail first (in steps of COVERAGE_STEP); then the seed's
    order (server, fleet, network, scheduling, host, client); then severity."""
    return sorted(
        findings,
        key=lambda f: (-round(f.coverage / COVERAGE_STEP), CATEGORIES.index(f.category), SEVERITIES.index(f.severity)),
    )


def split_causes(findings: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    """(causes, context): ranked findings that explain at least CONTEXT_SHARE of the tail, and the rest."""
    ranked = rank(findings)
    return [f for f in ranked if f.coverage >= CONTEXT_SHARE], [f for f in ranked if f.coverage < CONTEXT_SHARE]
