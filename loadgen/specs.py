"""What a level is asked to do (TargetSpec, LevelSpec) and what it reports (LevelProgress, LevelResult).

These are plain dataclasses that cross process boundaries as JSON: run_level hands them to the
locust process, the locust master hands them on to its workers.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any

from loadgen.replica_balancer import CLIENT_LB_POLICIES

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
DRAIN_MODES = ("keep_load", "stop_sending")


def _base_url(url: str) -> str:
    """A server's base URL, with or without a trailing /v1, as the base the endpoint paths go on."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


@dataclass
class TargetSpec:
    """The server under test: an OpenAI-compatible base URL (with or without a trailing /v1)."""

    url: str
    model: str
    api_key: str | None = None
    endpoint: str = "completions"  # completions | chat (chat needs text prompts)
    send_ignore_eos: bool = True  # vLLM/SGLang/refengine extension; turn off for servers that reject it
    omit_fields: list[str] = field(default_factory=list)  # request fields the preflight found refused
    replica_header: str | None = None  # response header naming the replica that served (RequestRecord.replica)
    # Replicas driven directly: the client balances the requests over these base URLs by lb_policy
    # (loadgen.replica_balancer) and each record names the replica by its index in this list, as the
    # server probe's per_engine does (docs/probes.md). Empty: every request goes to url.
    replica_urls: list[str] = field(default_factory=list)
    lb_policy: str = "round-robin"  # round-robin | least-outstanding, over replica_urls

    def __post_init__(self) -> None:
        if self.endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint must be one of {sorted(ENDPOINTS)}, got {self.endpoint!r}")
        if self.lb_policy not in CLIENT_LB_POLICIES:
            raise ValueError(f"lb_policy must be one of {', '.join(CLIENT_LB_POLICIES)}, got {self.lb_policy!r}")
        self.url = _base_url(self.url)
        self.replica_urls = [_base_url(u) for u in self.replica_urls]

    @property
    def path(self) -> str:
        return ENDPOINTS[self.endpoint]

    def replica_destination(self, index: int) -> tuple[str, str]:
        """Replica `index` of replica_urls: the full URL its request goes to, and the name its
        record gives it (the index, as the server probe's per_engine key)."""
        return self.replica_urls[index] + self.path, str(index)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def level_seed(run_seed: int, level_id: str) -> int:
    """The workload seed of one level of a run: its own, so that no level resends an earlier level's
    prompts. Servers keep a prefix cache across levels (vLLM's and refengine's are on by default), and
    with one seed for every level a level's request i was the earlier levels' request i: a prefix-cache
    hit whose TTFT is a fraction of a fresh prompt's (docs/metrics.md, "Every level's prompts are its
    own"). Derived from the level id, not its position, so that a resumed run or a re-ordered plan
    sends each level the same prompts."""
    digest = hashlib.sha256(f"{run_seed}:{level_id}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@dataclass
class LevelSpec:
    """One load level. Exactly one of `concurrency` (closed loop: N users back to back) and
    `request_rate` (open loop: gamma arrivals, burstiness 1 = Poisson) is set.

    Timeline: warm up for warmup_s, then the measured window of duration_s; requests sent inside
    the window have in_window=True. After the window the level drains: in `keep_load` mode (the
    default, docs/metrics.md: "the load keeps running until they finish") load continues,
    recorded as out of window, until every in-window request has finished, so the last in-window
    requests see the same load as the others; in `stop_sending` mode nothing new is sent after the
    window. Either way a request gets at most request_timeout_s, and whatever is still in flight
    when the level stops is recorded as `cancelled`.

    Sizing (docs/metrics.md, "Sizing a level"): with steady_warmup (closed loop) the warm-up lasts
    at least warmup_s and until every user has finished a request; with sample_target the window
    lasts at least duration_s and until it holds that many requests (finished ok, or still in
    flight); each at most max_duration_s. The coordinator decides both (loadgen.sizing).
    """

    level_id: str
    concurrency: int | None = None
    request_rate: float | None = None  # requests/s over all workers
    burstiness: float = 1.0  # gamma shape of inter-arrival gaps; 1 = Poisson, <1 burstier
    input_len: int = 512
    output_len: int = 128
    warmup_s: float = 5.0
    duration_s: float = 30.0
    request_timeout_s: float = 120.0  # connect + whole stream, per request
    workers: int = 1  # locust processes; >1 runs a master and N workers
    seed: int = 0
    drain: str = "keep_load"  # keep_load | stop_sending (see above)
    max_in_flight: int = 10_000  # open loop, per worker: more arrivals wait (and show as send lag)
    fail_fast: bool = True  # stop the level when its first requests all fail (loadgen.fail_fast)
    # Open loop: stop the level early when its queue keeps growing and TTFT is already past this
    # bound (loadgen.saturation); None never stops it.
    saturation_ttft_s: float | None = None
    # A trace workload's time scale at this level (a capacity search over a trace's rate sets one
    # per level); None: the workload's own trace_speed.
    trace_speed: float | None = None
    steady_warmup: bool = False  # closed loop: warm up until every user has finished a request
    sample_target: int | None = None  # end the window once it holds this many requests; None: duration_s
    max_duration_s: float | None = None  # bound of a steady warm-up and of a sized window (each)

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.request_rate is None):
            raise ValueError("set exactly one of concurrency (closed loop) and request_rate (open loop)")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.request_rate is not None and not self.request_rate > 0:
            raise ValueError(f"request_rate must be > 0, got {self.request_rate}")
        if not self.burstiness > 0:
            raise ValueError(f"burstiness must be > 0, got {self.burstiness}")
        if self.warmup_s < 0 or not self.duration_s > 0 or not self.request_timeout_s > 0:
            raise ValueError("warmup_s must be >= 0; duration_s and request_timeout_s must be > 0")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.drain not in DRAIN_MODES:
            raise ValueError(f"drain must be one of {DRAIN_MODES}, got {self.drain!r}")
        if self.trace_speed is not None and not self.trace_speed > 0:
            raise ValueError(f"trace_speed must be > 0, got {self.trace_speed}")
        self._check_sizing()

    def _check_sizing(self) -> None:
        if self.steady_warmup and self.open_loop:
            # An open-loop level has no users that finish requests: its warm-up is warmup_s.
            raise ValueError("steady_warmup is for closed-loop levels (concurrency)")
        if self.sample_target is not None and self.sample_target < 1:
            raise ValueError(f"sample_target must be >= 1, got {self.sample_target}")
        if not (self.steady_warmup or self.sample_target is not None):
            return
        if self.max_duration_s is None:
            raise ValueError("a sized level needs max_duration_s, its bound")
        if self.max_duration_s < max(
            self.warmup_s if self.steady_warmup else 0.0, self.duration_s if self.sample_target is not None else 0.0
        ):
            raise ValueError(
                f"max_duration_s ({self.max_duration_s:g} s) must be at least the minimum warm-up "
                f"({self.warmup_s:g} s) and window ({self.duration_s:g} s) it bounds"
            )

    @property
    def bound_s(self) -> float:
        """A sized level's max_duration_s (checked set): the bound of its steady warm-up and sized window."""
        if self.max_duration_s is None:
            raise ValueError("a fixed level has no max_duration_s bound")
        return self.max_duration_s

    @property
    def open_loop(self) -> bool:
        return self.request_rate is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class LevelProgress:
    """A snapshot for progress bars, sent every ~0.5 s while a level runs."""

    level_id: str
    phase: str  # starting | warmup | measuring | draining | done
    elapsed_s: float  # since the level's load started
    window_remaining_s: float  # of the measured window (0 once it is over)
    sent: int  # as last reported by the workers
    in_flight: int
    finished: int  # records received
    ok: int
    errors: int  # error + timeout records


@dataclass
class LevelResult:
    """Counts and client health of one level. Counts cover every request the level sent (warm-up,
    window and drain); in_window and in_window_ok are the measured subset."""

    level_id: str
    sent: int = 0
    in_window: int = 0
    in_window_ok: int = 0
    ok: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)  # error_kind -> count (timeouts included)
    timeouts: int = 0
    cancelled: int = 0
    t_start: float | None = None  # epoch seconds: the load started (the warm-up began)
    window_start: float | None = None
    window_end: float | None = None
    client_cpu_percent: float | None = None  # busiest load-generator process, mean over the window
    client_cpu_by_worker: dict[str, float] = field(default_factory=dict)
    send_lag_p50_s: float | None = None  # over in-window requests
    send_lag_p99_s: float | None = None
    fell_behind: bool = False
    fell_behind_reasons: list[str] = field(default_factory=list)
    server_died: bool = False
    warmup_end: str = "fixed"  # fixed | steady | max (loadgen.plan)
    window_end_by: str = "fixed"  # fixed | samples | max (loadgen.plan)
    end_reason: str = "complete"  # complete | server_died | deadline | interrupted | failed_fast | over_capacity
    over_capacity: str | None = None  # over_capacity: the evidence that the queue kept growing
    arrivals_note: str | None = None  # open loop: offered against achieved arrival rate in the window
    failure: str | None = None  # failed_fast: the server's own message of the commonest failure
    worker_ids: list[str] = field(default_factory=list)
    records_missing: int = 0  # sent per the workers' counters minus records received
    unreadable_lines: int = 0  # lines from the locust process that were not JSON (records lost)
    wall_s: float = 0.0
    client_log_tail: str = ""  # end of the locust processes' logs when the level hit its deadline

    @property
    def errors(self) -> int:
        return sum(self.errors_by_kind.values())
