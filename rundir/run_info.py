"""RunInfo: what ran, against what, with which spec and SLOs, and how it ended (run.json).

The target, sweep and SLO parts are typed, and so are the records inside them (the capacity
record, rundir/capacity.py). Keys this version does not know (a newer tool's, or a field since
removed) are kept in each part's `extra` and written back, so reading and rewriting a run.json
never loses what was there (rundir/record_json.py).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rundir.capacity import CapacityRecord
from rundir.record_json import record_from_dict, record_to_dict, split_known
from rundir.trace_replay import TraceReplay
from rundir.version import __version__
from rundir.workload_spec import WorkloadSpec

SCHEMA_VERSION = 1
RUN_STATUSES = ("running", "complete", "interrupted")
TARGET_KINDS = ("embedded", "external")

# Defaults the CLI, the sweep and the analyzers share (docs/metrics.md; the CLI shows them in --help).
DEFAULT_TTFT_P99_S = 1.5
DEFAULT_TPOT_P95_S = 0.050
DEFAULT_WARMUP_S = 5.0
DEFAULT_DURATION_S = 20.0
DEFAULT_MAX_DURATION_S = 60.0  # bound of a sized warm-up and of a sized window, each (docs/metrics.md)
DEFAULT_REQUEST_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class SloSpec:
    """The bounds a level must meet (seconds). analyzers.stats.slo adds the verdicts."""

    ttft_p99_s: float = DEFAULT_TTFT_P99_S
    tpot_p95_s: float = DEFAULT_TPOT_P95_S
    e2e_p99_s: float | None = None
    # The tool's defaults applied: the user gave no SLO (the answer then leads with what the data
    # says, reports/answer.py). False for a user's SLO, and for runs recorded before this field.
    default: bool = False

    def __post_init__(self) -> None:
        for name in ("ttft_p99_s", "tpot_p95_s", "e2e_p99_s"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, (int, float)) and v > 0):
                raise ValueError(f"SLO {name} must be a positive number of seconds, got {v!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class TargetInfo:
    """The server under test: the embedded refengine (a subprocess of the sweep) or an external URL."""

    url: str | None
    model: str | None
    # Several replicas driven directly (--target URL1,URL2): the client balances over them (lb_policy);
    # url is the first (the preflight's). Empty: every request goes to url.
    urls: list[str] = field(default_factory=list)
    kind: str = "external"  # embedded | external
    endpoint: str = "completions"  # completions | chat
    ignore_eos: bool = True  # whether the sweep asks the server to ignore EOS
    engine_args: list[str] = field(default_factory=list)  # embedded: extra `llmbench serve` flags
    server_threads: int | None = None
    # The response header naming the replica that served each request (RequestRecord.replica); None: not read.
    replica_header: str | None = None
    pid: int | None = None  # the server's process, when known (host and stacks probes)
    engine_facts: dict[str, Any] = field(default_factory=dict)  # the target's own account (/metrics)
    omit_fields: list[str] = field(default_factory=list)  # request fields the target refused (left out)
    adaptations: list[dict[str, Any]] = field(default_factory=list)  # what the preflight changed, and why
    # Engine replicas behind the URL (a load balancer over N engines): per-replica throughput divides by it.
    replicas: int = 1
    # Who balanced the requests over the replicas, and how (round-robin | least-outstanding): the
    # client over `urls`, or the embedded fleet's front. None: nobody of ours (one server, or a
    # router's own policy behind one URL), and runs recorded before the field.
    lb_policy: str | None = None
    # The /metrics pages the server probe read, one per replica, in replica order (--replica-metrics;
    # by default each of `urls`' own): per_engine's key i is the i-th. Empty: url's own page.
    replica_metrics: list[str] = field(default_factory=list)
    preflight_done: bool = False  # this run's requests are settled: a resumed sweep sends the same
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in TARGET_KINDS:
            raise ValueError(f"target kind must be one of {TARGET_KINDS}, got {self.kind!r}")
        if not isinstance(self.replicas, int) or self.replicas < 1:
            raise ValueError(f"target replicas must be an integer >= 1, got {self.replicas!r}")
        if self.urls and (len(self.urls) < 2 or self.urls[0] != self.url or self.replicas != len(self.urls)):
            raise ValueError(
                f"target urls are the replicas driven directly, the first being url: {self.urls} "
                f"with url {self.url!r} and {self.replicas} replicas"
            )
        if self.lb_policy is not None and (self.replicas < 2 or not (self.urls or self.kind == "embedded")):
            raise ValueError(
                f"target lb_policy {self.lb_policy!r} is ours to apply only over replicas driven "
                f"directly or the embedded fleet, not {self.replicas} replica(s) of a {self.kind} target"
            )
        if self.replica_metrics and len(self.replica_metrics) != self.replicas:
            raise ValueError(
                f"target replica_metrics lists a page per replica: {len(self.replica_metrics)} pages "
                f"for {self.replicas} replicas"
            )


@dataclass
class SweepInfo:
    """The sweep's plan as recorded: levels, workload, durations. loadgen turns it into levels."""

    concurrency: list[int] = field(default_factory=list)
    request_rate: list[float] = field(default_factory=list)
    input_lens: list[int] = field(default_factory=lambda: [128])
    output_lens: list[int] = field(default_factory=lambda: [64])
    warmup_s: float = DEFAULT_WARMUP_S
    duration_s: float = DEFAULT_DURATION_S
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    workers: int = 1
    burstiness: float = 1.0
    # What builds the requests (kind, spreads, dataset, vocab size, ...), minus the lengths and
    # seed, which come from each level (rundir/workload_spec.py).
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    seed: int = 0
    probe_only: bool = False  # `llmdiag probe`: probes, no load
    # Sizing (docs/metrics.md, "Sizing a level"); the defaults are a fixed timeline, as recorded
    # before sizing existed. warmup_s and duration_s are then the minimums.
    steady_warmup: bool = False  # closed loop: warm up until every user has finished a request
    sample_target: int | None = None  # a window ends once it holds this many requests
    max_duration_s: float | None = None  # bound of a sized warm-up and of a sized window, each
    # `llmbench capacity`: its search, probes and answer (None: not a capacity run), and whether
    # open-loop levels may be stopped early when their queue keeps growing.
    capacity: CapacityRecord | None = None
    stop_over_capacity: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    # Absent rather than null in a run that is not a capacity search, as before the field existed.
    OMIT_WHEN_NONE: ClassVar[tuple[str, ...]] = ("capacity",)

    def __post_init__(self) -> None:
        if self.capacity is not None and not isinstance(self.capacity, CapacityRecord):
            raise TypeError("SweepInfo.capacity is a CapacityRecord (use SweepInfo.from_dict for JSON)")
        if not isinstance(self.workload, WorkloadSpec):
            raise TypeError("SweepInfo.workload is a WorkloadSpec (use SweepInfo.from_dict for JSON)")

    def is_capacity_search(self) -> bool:
        """A `llmbench capacity` run, whose levels a search decides: its record read, or kept unread."""
        return self.capacity is not None or "capacity" in self.extra

    def to_dict(self) -> dict[str, Any]:
        return record_to_dict(self, self.OMIT_WHEN_NONE)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "SweepInfo":
        """From run.json's `sweep`, its workload typed (a run.json without one: the default). A
        capacity record this version cannot read stays, unread, in `extra` (and is written back as
        it was): the run still reads, as a run with no search."""
        d = dict(d or {})
        raw = d.pop("capacity", None)
        try:
            capacity = None if raw is None else CapacityRecord.from_dict(raw)
        except (TypeError, ValueError):
            capacity = None
        workload = WorkloadSpec.from_dict(d.pop("workload")) if "workload" in d else WorkloadSpec()
        sweep = record_from_dict(cls, d, capacity=capacity, workload=workload)
        if capacity is None and raw is not None:
            sweep.extra["capacity"] = raw
        return sweep


@dataclass
class LevelMeta:
    """What the sweep knew of a level that its records do not say (run.json's `level_meta`), so
    that `llmbench report` rebuilds the same summary from the files alone."""

    window_s: float | None = None  # the measured window's length
    window_start: float | None = None  # its bounds, epoch seconds
    window_end: float | None = None
    nominal_s: float | None = None  # the window it was planned for (--duration)
    notes: list[str] = field(default_factory=list)  # the client's own findings (fell behind, records missing)
    cut_short: bool = False  # it ended before its window did (Ctrl-C, the target gone)
    over_capacity: str | None = None  # why it was stopped early: its queue kept growing
    warmup_s: float | None = None  # the warm-up it really had (a steady one's length varies)
    warmup_end: str | None = None  # fixed (--warmup) | steady | max (at --max-duration)
    window_end_by: str | None = None  # fixed (--duration) | samples (sample_target reached) | max
    sample_target: int | None = None  # the requests its window was sized for (None: fixed)
    trace: TraceReplay | None = None  # --workload trace: played once, in part, or cycled (and why)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.trace = TraceReplay.of(self.trace)  # run.json holds it as an object
        if self.window_s is not None and not self.window_s >= 0:
            raise ValueError(f"a level's window must not be negative, got {self.window_s!r}")
        if not isinstance(self.notes, list):
            raise TypeError(f"a level's notes are a list of strings, got {type(self.notes).__name__}")


@dataclass
class RunInfo:
    run_id: str
    command: list[str]
    target: TargetInfo
    sweep: SweepInfo
    slos: SloSpec
    host: dict[str, Any]
    tool_version: str = __version__
    schema_version: int = SCHEMA_VERSION
    status: str = "running"
    started: float = field(default_factory=time.time)
    finished: float | None = None
    probes: dict[str, Any] = field(default_factory=dict)  # probe name -> "ok" or why it could not run
    levels_done: list[str] = field(default_factory=list)
    level_meta: dict[str, LevelMeta] = field(default_factory=dict)  # level id -> what the records do not say

    def __post_init__(self) -> None:
        if self.status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {RUN_STATUSES}, got {self.status!r}")
        if (
            not isinstance(self.target, TargetInfo)
            or not isinstance(self.sweep, SweepInfo)
            or not isinstance(self.slos, SloSpec)
        ):
            raise TypeError("RunInfo takes TargetInfo, SweepInfo and SloSpec (use RunInfo.from_dict for JSON)")
        if not all(isinstance(m, LevelMeta) for m in self.level_meta.values()):
            raise TypeError("RunInfo.level_meta holds LevelMeta (use RunInfo.from_dict for JSON)")

    def to_dict(self) -> dict[str, Any]:
        return record_to_dict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunInfo":
        """From run.json's object; raises ValueError/TypeError with the reason when it is not one."""
        if not isinstance(d, dict):
            raise ValueError("run.json must hold a JSON object")
        d = dict(d)
        slos = {k: v for k, v in (d.get("slos") or {}).items() if v is not None}
        d["target"] = record_from_dict(TargetInfo, d.get("target"))
        d["sweep"] = SweepInfo.from_dict(d.get("sweep"))
        d["slos"] = SloSpec(**split_known(SloSpec, slos)[0])
        d["level_meta"] = {str(k): record_from_dict(LevelMeta, v) for k, v in (d.get("level_meta") or {}).items()}
        known, _ = split_known(cls, d)
        missing = {"run_id", "command", "host"} - known.keys()
        if missing:
            raise ValueError(f"run.json lacks {', '.join(sorted(missing))}")
        return cls(**known)
