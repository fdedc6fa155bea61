"""Playbooks as data: Markdown a person reads, with step ids a diagnosis command runs and cites.

Format (`playbooks/<name>.md`):

    # Title                                  the playbook's title (first line)
    ## 1. Network                            a section; steps belong to the last one seen
    ### [p99.net.retransmits] TCP retransmits in the spike windows (automatic)
    Free Markdown until the next heading: what to look at, why, what to do.

A step heading is `### [<id>] <title> (automatic|manual)`; ids are unique, lowercase, dotted.
Automatic steps are checked by a command; manual ones are cited for a person to do.

A run (`PlaybookRun`) records, per step, passed / failed / could not be checked / manual with its
evidence. Invariants: only automatic steps can pass or fail; every step id marked exists; at the
end every automatic step the command never reached reads "could not be checked: no check ran",
and every manual step reads "manual" — so a printed playbook never silently drops a step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Callable

PLAYBOOK_DIR = Path(__file__).resolve().parent
_STEP = re.compile(r"^###\s+\[(?P<id>[a-z0-9][a-z0-9_.-]*)\]\s+(?P<title>.+?)\s+\((?P<mode>automatic|manual)\)\s*$")
_SECTION = re.compile(r"^##\s+(?P<title>[^#].*?)\s*$")
_TITLE = re.compile(r"^#\s+(?P<title>.+?)\s*$")


class PlaybookError(ValueError):
    """A malformed playbook file or a command that marks a step the wrong way (a bug, not a user error)."""


class Status(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    UNCHECKED = "could not be checked"
    MANUAL = "manual"


@dataclass(frozen=True)
class Step:
    id: str
    title: str
    automatic: bool
    section: str
    body: str

    @property
    def mode(self) -> str:
        return "automatic" if self.automatic else "manual"


@dataclass(frozen=True)
class Playbook:
    name: str
    title: str
    steps: tuple[Step, ...]

    def __post_init__(self) -> None:
        ids = [s.id for s in self.steps]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise PlaybookError(f"playbook {self.name!r}: duplicate step ids {dupes}")
        if not self.steps:
            raise PlaybookError(f"playbook {self.name!r} has no steps")

    def step(self, step_id: str) -> Step:
        for s in self.steps:
            if s.id == step_id:
                return s
        raise PlaybookError(f"playbook {self.name!r} has no step {step_id!r}")

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.steps]


def parse_playbook(text: str, name: str) -> Playbook:
    title, section, steps = name, "", []
    current: dict | None = None
    body: list[str] = []

    def close() -> None:
        if current is not None:
            steps.append(Step(body="\n".join(body).strip(), **current))

    for line in text.splitlines():
        if m := _STEP.match(line):
            close()
            current = dict(id=m["id"], title=m["title"], automatic=m["mode"] == "automatic", section=section)
            body = []
        elif line.startswith("###"):
            raise PlaybookError(f"playbook {name!r}: step heading without '[id] title (automatic|manual)': {line!r}")
        elif m := _SECTION.match(line):
            close()
            current, section = None, m["title"]
        elif (m := _TITLE.match(line)) and not steps and current is None:
            title = m["title"]
        elif current is not None:
            body.append(line)
    close()
    return Playbook(name=name, title=title, steps=tuple(steps))


def load_playbook(name: str) -> Playbook:
    """`oom` or `p99` (files next to this module), or a path to a Markdown file."""
    path = Path(name) if name.endswith(".md") else PLAYBOOK_DIR / f"{name}.md"
    if not path.is_file():
        raise PlaybookError(f"no playbook {name!r} (looked for {path})")
    return parse_playbook(path.read_text(encoding="utf-8"), path.stem)


@dataclass(frozen=True)
class StepResult:
    step: Step
    status: Status
    evidence: str


class CannotCheck(Exception):
    """Raised by a check that lacks its evidence (no log given, no probe data, no GPU)."""


# A check returns (passed?, evidence) or raises CannotCheck(why).
Check = Callable[[], "tuple[bool, str]"]


@dataclass
class PlaybookRun:
    playbook: Playbook
    _marks: dict[str, tuple[Status, str]] = field(default_factory=dict)

    def mark(self, step_id: str, status: Status, evidence: str) -> None:
        step = self.playbook.step(step_id)
        if not step.automatic and status in (Status.PASSED, Status.FAILED):
            raise PlaybookError(f"step {step_id!r} is manual: it can be cited, not passed or failed")
        self._marks[step_id] = (status, evidence)

    def passed(self, step_id: str, evidence: str) -> None:
        self.mark(step_id, Status.PASSED, evidence)

    def failed(self, step_id: str, evidence: str) -> None:
        self.mark(step_id, Status.FAILED, evidence)

    def unchecked(self, step_id: str, why: str) -> None:
        self.mark(step_id, Status.UNCHECKED, why)

    def note(self, step_id: str, evidence: str) -> None:
        """Attach what a command knows to a manual step (e.g. the priced fix)."""
        self.mark(step_id, Status.MANUAL, evidence)

    def run(self, checks: dict[str, Check]) -> None:
        """Run each automatic step's check in playbook order; a check that raises CannotCheck is unchecked."""
        unknown = set(checks) - set(self.playbook.ids)
        if unknown:
            raise PlaybookError(f"checks for steps not in playbook {self.playbook.name!r}: {sorted(unknown)}")
        for step in self.playbook.steps:
            if step.id not in checks:
                continue
            try:
                ok, evidence = checks[step.id]()
            except CannotCheck as why:
                self.unchecked(step.id, str(why))
            else:
                self.mark(step.id, Status.PASSED if ok else Status.FAILED, evidence)

    def results(self) -> list[StepResult]:
        out = []
        for step in self.playbook.steps:
            if step.id in self._marks:
                status, evidence = self._marks[step.id]
            elif step.automatic:
                status, evidence = Status.UNCHECKED, "no check ran"
            else:
                status, evidence = Status.MANUAL, _first_sentence(step.body)
            out.append(StepResult(step, status, evidence))
        return out

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Status}
        for r in self.results():
            counts[r.status.value] += 1
        return counts

    def to_dict(self) -> dict:
        """For summary.json / the HTML report."""
        return {
            "playbook": self.playbook.name,
            "title": self.playbook.title,
            "counts": self.counts(),
            "steps": [
                {
                    "id": r.step.id,
                    "section": r.step.section,
                    "title": r.step.title,
                    "mode": r.step.mode,
                    "status": r.status.value,
                    "evidence": r.evidence,
                }
                for r in self.results()
            ],
        }


def _first_sentence(body: str) -> str:
    text = " ".join(body.split())
    end = text.find(". ")
    return text[: end + 1] if end > 0 else text
