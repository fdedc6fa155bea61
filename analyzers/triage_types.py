"""The contract of the P99 triage: each check returns a CheckResult, which may carry a Finding.

A check either could not run (no data: status "unchecked", with the reason), ran and found
nothing ("passed"), or found a cause ("failed", with a Finding). A Finding always carries the
numbers behind it and the spike windows it explains; nothing is reported without evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from analyzers.tail_windows import Window

CATEGORIES = ("network", "scheduling", "host", "client")   # the seed's order, then the measurement itself
SEVERITIES = ("high", "medium", "low")
STATUSES = ("failed", "passed", "unchecked")


@dataclass
class Finding:
    check_id: str                       # the playbook step this check automates, e.g. "p99.sched.long-prefill"
    category: str
    severity: str
    title: str                          # one line, plain words
    evidence: dict[str, Any]            # the numbers behind it
    explains: list[Window]              # spike windows where the evidence coincides
    spike_windows: int                  # spike windows in this check's scope (e.g. those of short requests)
    next_step: str                      # what to do or look at next

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"category must be one of {CATEGORIES}, got {self.category!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        if not self.evidence:
            raise ValueError(f"finding {self.check_id} has no evidence")

    @property
    def coverage(self) -> float:
        """Share of the spike windows this finding coincides with."""
        return len(self.explains) / self.spike_windows if self.spike_windows else 0.0


@dataclass
class CheckResult:
    check_id: str
    category: str
    title: str                          # what was checked
    status: str
    detail: str                         # why it passed, failed, or could not be checked
    finding: Finding | None = None
    numbers: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")
        if (self.status == "failed") != (self.finding is not None):
            raise ValueError(f"check {self.check_id}: a finding goes with status 'failed' and only with it")


def unchecked(check_id: str, category: str, title: str, why: str) -> CheckResult:
    return CheckResult(check_id, category, title, "unchecked", why)


def passed(check_id: str, category: str, title: str, why: str, **numbers: Any) -> CheckResult:
    return CheckResult(check_id, category, title, "passed", why, numbers=numbers)


def failed(finding: Finding, title: str, detail: str) -> CheckResult:
    return CheckResult(finding.check_id, finding.category, title, "failed", detail, finding=finding,
                       numbers=dict(finding.evidence))


def rank(findings: list[Finding]) -> list[Finding]:
    """Most severe first; then the one that explains more of the spikes; then the seed's order."""
    return sorted(findings, key=lambda f: (SEVERITIES.index(f.severity), -f.coverage,
                                           CATEGORIES.index(f.category)))
