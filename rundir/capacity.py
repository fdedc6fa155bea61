"""The capacity record: `llmbench capacity`'s search, its probes and its answer, in run.json
(`sweep.capacity`) and capacity.json (docs/run-format.md).

The face (llmbench/capacity) writes it as the search goes and once the answer exists; the
analyzers compute the answer (analyzers/capacity/answer.py) and the reports lead with it. A
record of another version reads without failing the run: an answer this version cannot read is
no answer (never a wrong one), kept as it was and written back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from rundir.record_json import plain, record_from_dict, record_to_dict

CAPACITY_AXES = ("concurrency", "rate")
PROBE_PHASES = ("bracket", "bisect", "confirm")
LOAD_VERDICTS = ("in", "out", "unclear")
BOUNDED_BY = ("slo", "client", "errors", "limit", "none")

T = TypeVar("T")


@dataclass
class CapacitySearch:
    """The search's options as recorded (llmbench.capacity.search.SearchSpec adds its arithmetic),
    so that `llmbench capacity --resume` replays the same search."""

    axis: str = "concurrency"  # concurrency | rate
    start: float = 1.0
    limit: float = 1024.0  # the highest load the bracket tries
    resolution: float = 1.0  # concurrency: absolute step; rate: relative (0.1 = 10 %)
    repeats: int = 3  # measurements of each boundary load, first included
    max_extra: int = 4  # more loads the confirmation may add around the boundary
    # A trace's mean request rate at speed 1 (--workload trace, rate axis only): a load of L req/s
    # replays the trace at speed L / trace_rate, so its arrivals keep the trace's own shape.
    trace_rate: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.axis not in CAPACITY_AXES:
            raise ValueError(f"a capacity search's axis is one of {', '.join(CAPACITY_AXES)}, got {self.axis!r}")


@dataclass
class CapacityProbe:
    """One measured level of the search."""

    level_id: str
    load: float
    phase: str  # bracket | bisect | confirm
    met: bool | None = None  # the level's own verdict
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.phase not in PROBE_PHASES:
            raise ValueError(f"a capacity probe's phase is one of {', '.join(PROBE_PHASES)}, got {self.phase!r}")


@dataclass
class LoadVerdict:
    """One load's verdict on its requests pooled over its levels (analyzers/capacity/answer.py)."""

    load: float
    level_ids: list[str]
    verdict: str  # in | out | unclear
    point_met: bool  # the pooled point estimates (failures counted) meet every bound
    n: int  # pooled requests counted: sent in the window, cancelled aside
    ttft_p99_s: float | None  # the successful requests' P99 (the failures are counted beside)
    ttft_p99_ci: list[float] | None
    tpot_p95_s: float | None
    tpot_p95_ci: list[float] | None
    goodput_req_s: float  # mean over the load's levels
    output_tok_s: float
    reasons: list[str] = field(default_factory=list)  # why `out` when no percentile says so; how many failed
    over_bound: dict[str, int] = field(default_factory=dict)  # what the verdict rests on: {"TTFT P99": 0, ...}
    # requests (of n) over each bound
    # ... how clustered they were: the design effect by which the test was widened (1: as independent)
    design_effect: dict[str, float] = field(default_factory=dict)
    too_few: bool = False  # unclear only for want of requests (none over a bound)
    failed: int = 0  # of n: errors and timeouts (over the bounds they never reached)
    failed_no_token: int = 0  # ... of which without a first token
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in LOAD_VERDICTS:
            raise ValueError(f"a load's verdict is one of {', '.join(LOAD_VERDICTS)}, got {self.verdict!r}")


@dataclass
class CapacityAnswer:
    """The highest load within the SLO, with its interval (analyzers/capacity/answer.py)."""

    axis: str  # concurrency | rate
    capacity: float | None  # None: not even the lowest load met the SLO
    low: float | None
    high: float | None
    lowest_out: float | None
    bounded_by: str  # slo | client | errors | limit | none
    goodput_req_s: float | None
    output_tok_s: float | None
    loads: list[LoadVerdict]
    confidence: float = 0.95
    trace_rate: float | None = None  # a trace's own mean req/s: the answer is also a speed
    headline: str | None = None  # the answer in words, as printed (reports/capacity_words.py)
    # The target's replicas (run.json's target.replicas): the answer is the fleet's; per replica it is / N
    # (analyzers/capacity/replicas.py). busiest_share: at the capacity's load, the largest share of its
    # requests one replica served (1/N is even; None: one replica, or no record named its replica).
    replicas: int = 1
    busiest_share: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.axis not in CAPACITY_AXES:
            raise ValueError(f"a capacity answer's axis is one of {', '.join(CAPACITY_AXES)}, got {self.axis!r}")
        if not isinstance(self.replicas, int) or self.replicas < 1:
            raise ValueError(f"a capacity answer's replicas is an integer >= 1, got {self.replicas!r}")
        if self.bounded_by not in BOUNDED_BY:
            raise ValueError(f"a capacity answer is bounded by one of {', '.join(BOUNDED_BY)}, got {self.bounded_by!r}")

    def to_dict(self) -> dict[str, Any]:
        return record_to_dict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CapacityAnswer":
        """The inverse of to_dict; raises TypeError or ValueError on an answer of another shape."""
        loads = [record_from_dict(LoadVerdict, x) for x in d.get("loads") or []]
        return record_from_dict(cls, d, loads=loads)


@dataclass
class CapacityRecord:
    """run.json's `sweep.capacity` and capacity.json: `search` and `probes` while the search runs
    (and in an interrupted run), `answer` once it exists."""

    search: CapacitySearch | None = None
    probes: list[CapacityProbe] = field(default_factory=list)
    answer: CapacityAnswer | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    # Absent rather than null while unknown, as the record has always been written.
    OMIT_WHEN_NONE: ClassVar[tuple[str, ...]] = ("search", "answer")

    def __post_init__(self) -> None:
        if not all(isinstance(p, CapacityProbe) for p in self.probes):
            raise TypeError("CapacityRecord.probes holds CapacityProbe (use CapacityRecord.from_dict for JSON)")

    def to_dict(self) -> dict[str, Any]:
        return record_to_dict(self, self.OMIT_WHEN_NONE)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CapacityRecord":
        """From its JSON object. A search or an answer this version cannot read is kept, unread, in
        `extra` (written back as it was); probes that do not read raise TypeError or ValueError."""
        if not isinstance(d, dict):
            raise TypeError(f"a capacity record is a JSON object, got {type(d).__name__}")
        unread: dict[str, Any] = {}
        search = _lenient(lambda x: record_from_dict(CapacitySearch, x), d.get("search"), "search", unread)
        answer = _lenient(CapacityAnswer.from_dict, d.get("answer"), "answer", unread)
        probes = [record_from_dict(CapacityProbe, p) for p in d.get("probes") or []]
        record = record_from_dict(cls, d, search=search, answer=answer, probes=probes)
        record.extra.update(unread)
        return record


def _lenient(read: Callable[[dict[str, Any]], T], value: Any, key: str, unread: dict[str, Any]) -> T | None:
    """`read(value)`, or None with `value` set aside in `unread` when it is not one."""
    if value is None:
        return None
    try:
        if not isinstance(value, dict):
            raise TypeError(f"{key} is not a JSON object")
        return read(value)
    except (TypeError, ValueError):
        unread[key] = plain(value)
        return None
