"""MachineProfile: what one machine's operators cost, as the step model reads it (a versioned JSON file).

A profile is either measured (`llmdiag calibrate --out FILE`: tables of this machine's own timings)
or published (analyzers/plan/gpu_profiles.py: peak FLOP/s and bandwidth times stated efficiency
factors). Both share one roofline, so a shape outside a measured table still gets a time; every such
use is recorded as an extrapolation note, never silently (docs/planning.md).

Tables:
- matmul: seconds of `F.linear` of an [M, s] input by an [s, s] weight at a grid of (M, s);
  a query (M, K, N) is read at s = sqrt(K x N) (the same weight bytes and FLOP per row), log-log
  bilinear inside the grid.
- attention_decode: seconds = a + (b x KV elements read + c x query elements) / the kernel's threads,
  from refengine's decode path at two GQA ratios (analyzers/plan/decode_attention.py).
- attention_prefill: seconds = a + b x (query tokens x context x heads x head_dim); where measured,
  attention_prefill_table (analyzers/plan/attention_table.py) replaces it: per head, by tokens and
  head dim.
- elementwise: seconds per layer of refengine's norms, RoPE, activation and residual adds
  = a + b x (tokens x hidden).
- layer_overhead: seconds per decoder layer of the engine's own code beyond the tables (module
  calls, dispatch, the q/k/v split, the residual glue) = a + b x (requests in the step).
- step_overhead: seconds per engine step outside the model (scheduler, input tensors, sampler,
  output processing) = a + b x (requests in the step); each request waits `request_overhead_s` +
  `request_overhead_per_running_s` x (requests the server is running) + `request_overhead_per_prompt_token_s`
  x (its prompt tokens) before the scheduler sees it (HTTP and tokenization on an event loop busy
  streaming the others: analyzers/plan/request_overhead.py), 0 unless measured or fitted.
- contended_share: the share of a served engine's operator time computed at the next thread count
  below its own that the profile measured (`fewer_threads`), because processes beside it (the load
  generator, the server's event loop) hold cores its threads want: a prefill's matmuls slow down
  on fewer threads, a decode's barely. Fitted to the prefill phase the server publishes, 0 otherwise.
- collective: seconds = latency + bytes x bus factor / bus bandwidth (nccl-tests' busbw).
- fewer_threads: the matmul, attention and elementwise tables again at fewer threads, for ranks
  that share a CPU host's cores (refengine gives each of R ranks cores // R threads): a prefill's
  matmul on one thread takes up to twice its two-thread time, a decode's about the same.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from analyzers.diagnosis_error import DiagnosisError
from analyzers.plan.attention_table import AttentionTable
from analyzers.plan.decode_attention import DecodeAttentionCost
from analyzers.plan.loglog_grid import loglog_bilinear
from analyzers.plan.request_overhead import RequestOverhead
from analyzers.plan.step_jitter import StepJitter

PROFILE_SCHEMA = 1


@dataclass(frozen=True)
class LinearCost:
    """seconds = fixed_s + per_unit_s x units, valid for units in [lo, hi] (the measured range)."""

    fixed_s: float
    per_unit_s: float
    lo: float = 0.0
    hi: float = math.inf

    def __post_init__(self) -> None:
        if self.fixed_s < 0 or self.per_unit_s < 0 or self.lo > self.hi:
            raise DiagnosisError(f"a linear cost needs fixed >= 0, per unit >= 0 and lo <= hi, got {self}")

    def seconds(self, units: float, notes: set[str] | None = None, what: str = "") -> float:
        if notes is not None and units > self.hi * 1.001 and units > 0:
            # One note a kind, not one a shape: a sweep's prediction evaluates thousands of steps.
            notes.add(f"{what} beyond the measured {self.hi:,.0f} (extrapolated linearly)")
        return self.fixed_s + self.per_unit_s * units

    @classmethod
    def fit(cls, xs: list[float], ys: list[float]) -> "LinearCost":
        """Least squares in relative error (each point over its own time, so the small shapes a decode
        step has count as much as the big ones), both coefficients >= 0."""
        if len(xs) < 2 or len(xs) != len(ys) or min(ys) <= 0:
            raise DiagnosisError("a linear fit needs at least two points with positive times")
        rows = [(1 / y, x / y) for x, y in zip(xs, ys)]

        def residual(a: float, b: float) -> float:
            return sum((a * r0 + b * r1 - 1) ** 2 for r0, r1 in rows)

        s00 = sum(r0 * r0 for r0, _ in rows)
        s01 = sum(r0 * r1 for r0, r1 in rows)
        s11 = sum(r1 * r1 for _, r1 in rows)
        t0, t1 = sum(r0 for r0, _ in rows), sum(r1 for _, r1 in rows)
        det = s00 * s11 - s01 * s01
        candidates = [(t0 / s00, 0.0), (0.0, t1 / s11 if s11 > 0 else 0.0)]
        if det > 1e-30 * s00 * s11:
            a, b = (t0 * s11 - t1 * s01) / det, (t1 * s00 - t0 * s01) / det
            if a >= 0 and b >= 0:
                candidates.append((a, b))
        a, b = min(candidates, key=lambda ab: residual(*ab))
        return cls(a, b, min(xs), max(xs))


@dataclass(frozen=True)
class Roofline:
    """The analytic fallback: time = max(FLOP / (peak x eff), bytes / (bandwidth x eff)) + launch."""

    peak_flops: float  # FLOP/s of the dtype the model computes in
    mem_bw_bytes_s: float
    compute_efficiency: float = 0.6
    memory_efficiency: float = 0.8
    launch_s: float = 5e-6  # per kernel (GPU launch, or a CPU op's dispatch)

    def __post_init__(self) -> None:
        if (
            self.peak_flops <= 0
            or self.mem_bw_bytes_s <= 0
            or not (0 < self.compute_efficiency <= 1)
            or not (0 < self.memory_efficiency <= 1)
            or self.launch_s < 0
        ):
            raise DiagnosisError(f"a roofline needs positive peaks and efficiencies in (0, 1], got {self}")

    def seconds(self, flops: float, nbytes: float) -> float:
        return (
            max(
                flops / (self.peak_flops * self.compute_efficiency),
                nbytes / (self.mem_bw_bytes_s * self.memory_efficiency),
            )
            + self.launch_s
        )


@dataclass(frozen=True)
class MatmulTable:
    """Measured F.linear seconds on the grid ms x sizes (times[i][j] for ms[i], sizes[j])."""

    ms: list[int]
    sizes: list[int]
    times: list[list[float]]

    def __post_init__(self) -> None:
        if (
            len(self.ms) < 2
            or len(self.sizes) < 2
            or len(self.times) != len(self.ms)
            or any(len(row) != len(self.sizes) for row in self.times)
        ):
            raise DiagnosisError("a matmul table needs a grid of at least 2 x 2 with a time for every point")
        if sorted(self.ms) != self.ms or sorted(self.sizes) != self.sizes or min(min(r) for r in self.times) <= 0:
            raise DiagnosisError("a matmul table's axes must be increasing and its times positive")

    def seconds(self, m: int, k: int, n: int, notes: set[str] | None = None) -> float:
        s = math.sqrt(k * n)
        mm = min(max(m, self.ms[0]), self.ms[-1])
        ss = min(max(s, self.sizes[0]), self.sizes[-1])
        t = math.exp(loglog_bilinear(self.ms, self.sizes, self.times, mm, ss))
        # Outside the grid: scale the edge by the FLOP ratio (exact for large M, an upper bound for small).
        scale = (m / mm) * (s * s) / (ss * ss)
        if notes is not None and (m > self.ms[-1] or s > self.sizes[-1] * 1.001):
            notes.add(
                f"matmuls beyond the measured grid (M <= {self.ms[-1]}, size <= {self.sizes[-1]}): "
                "scaled by FLOP from its edge"
            )
        return t * scale if scale > 1 else t


def _measured_on(assumptions: list[str]) -> str:
    """The host a profile written before `host` existed names in its first assumption ("measured on X (...")."""
    m = re.match(r"measured on (\S+) \(", assumptions[0]) if assumptions else None
    return m.group(1) if m else ""


@dataclass(frozen=True)
class CollectiveCost:
    """One collective over n ranks: latency + bytes x bus factor / bus bandwidth."""

    latency_s: float
    bus_bw_bytes_s: float

    def __post_init__(self) -> None:
        if self.latency_s < 0 or self.bus_bw_bytes_s <= 0:
            raise DiagnosisError(f"a collective cost needs latency >= 0 and bandwidth > 0, got {self}")

    def seconds(self, op: str, nbytes: float, n: int) -> float:
        if n <= 1:
            return 0.0
        factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n if op != "sendrecv" else 1.0
        return self.latency_s + nbytes * factor / self.bus_bw_bytes_s


@dataclass(frozen=True)
class ThreadTables:
    """The operator tables measured at `threads` threads, fewer than the profile's own."""

    threads: int
    matmul: MatmulTable
    attention_decode: DecodeAttentionCost
    attention_prefill: LinearCost
    elementwise: LinearCost
    attention_prefill_table: AttentionTable | None = None

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise DiagnosisError(f"thread tables need threads >= 1, got {self.threads}")

    @classmethod
    def from_dict(cls, d: dict) -> "ThreadTables":
        return cls(
            threads=d["threads"],
            matmul=MatmulTable(**d["matmul"]),
            attention_decode=DecodeAttentionCost.from_dict(d["attention_decode"]),
            attention_prefill=LinearCost(**d["attention_prefill"]),
            elementwise=LinearCost(**d["elementwise"]),
            attention_prefill_table=_attention_table(d),
        )


def _attention_table(d: dict) -> AttentionTable | None:
    return AttentionTable(**d["attention_prefill_table"]) if d.get("attention_prefill_table") else None


# The fields a ThreadTables replaces in a profile: its operator tables, all but its thread count.
OPERATOR_FIELDS = tuple(f.name for f in dataclasses.fields(ThreadTables) if f.name != "threads")


@dataclass(frozen=True)
class MachineProfile:
    name: str
    source: str  # measured | published | fitted
    dtype_bytes: int  # the element size the model computes in
    roofline: Roofline
    step_overhead: LinearCost  # per step, by requests in the step
    collective: CollectiveCost
    matmul: MatmulTable | None = None
    attention_decode: DecodeAttentionCost | None = None  # by KV and query elements
    attention_prefill: LinearCost | None = None  # by tokens x context x heads x head_dim
    attention_prefill_table: AttentionTable | None = None  # measured per head: read before the line above
    elementwise: LinearCost | None = None  # per layer, by tokens x hidden
    layer_overhead: LinearCost | None = None  # per layer, by requests: the engine's own code beyond the tables
    request_overhead_s: float = 0.0  # once per request, on its TTFT ...
    request_overhead_per_running_s: float = 0.0  # ... plus this per request the server is running then ...
    request_overhead_per_prompt_token_s: float = 0.0  # ... plus this per token of its prompt
    compute_scale: float = 1.0  # multiplies every operator's time (fitted to a run)
    contended_share: float = 0.0  # of the operators' time, at the next fewer threads measured (fitted to a run)
    step_jitter: StepJitter | None = None  # added to every simulated step (measured on a run); None: steady
    assumptions: list[str] = field(default_factory=list)
    created: str = ""
    host: str = ""  # the machine a measured profile measured (platform.node()); "" unknown
    measured_points: dict = field(default_factory=dict)  # what a calibration measured, for the record
    threads: int = 0  # threads the tables were measured with (0: not a CPU measurement)
    cores: int = 0  # the measured host's cores, which its ranks share (0: each rank has a device of its own)
    fewer_threads: list[ThreadTables] = field(default_factory=list)
    schema_version: int = PROFILE_SCHEMA

    def __post_init__(self) -> None:
        if self.source not in ("measured", "published", "fitted"):
            raise DiagnosisError(f"profile source must be measured, published or fitted, got {self.source!r}")
        if self.dtype_bytes not in (1, 2, 4):
            raise DiagnosisError(f"profile dtype_bytes must be 1, 2 or 4, got {self.dtype_bytes}")
        _ = self.request_overhead  # RequestOverhead checks its terms are >= 0
        if not self.compute_scale > 0:
            raise DiagnosisError(f"compute_scale must be > 0, got {self.compute_scale}")
        if not 0.0 <= self.contended_share <= 1.0:
            raise DiagnosisError(f"contended_share must be in [0, 1], got {self.contended_share}")

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def request_overhead(self) -> RequestOverhead:
        return RequestOverhead(
            self.request_overhead_s, self.request_overhead_per_running_s, self.request_overhead_per_prompt_token_s
        )

    def with_request_overhead(self, overhead: RequestOverhead) -> "MachineProfile":
        return dataclasses.replace(
            self,
            request_overhead_s=overhead.fixed_s,
            request_overhead_per_running_s=overhead.per_running_s,
            request_overhead_per_prompt_token_s=overhead.per_prompt_token_s,
        )

    @property
    def device_type(self) -> str:
        """What the profiled machine's engine computes on, as refengine names it: "cpu" where its ranks
        share a host's cores (a measured CPU host), else "cuda" (each rank a device of its own)."""
        return "cpu" if self.cores > 0 else "cuda"

    def for_ranks(self, ranks: int) -> tuple["MachineProfile", str | None]:
        """The profile as each of `ranks` ranks on one host of this profile's sees it: the tables
        measured at cores // ranks threads (refengine's own split of a host's cores among its ranks),
        or these, with a note saying what they get wrong, when that thread count was not measured."""
        if ranks <= 1 or self.cores < 1 or self.threads < 1:
            return self, None
        threads = max(1, self.cores // ranks)
        if threads >= self.threads:
            return self, None
        for t in self.fewer_threads:
            if t.threads == threads:
                return self.at_threads(t), None
        return self, (
            f"{ranks} ranks share this host's {self.cores} cores ({threads} threads each), but the profile "
            f"measured its operators at {self.threads} threads only: prefill-sized matmuls are priced up to "
            f"{self.threads / threads:.0f}x fast (llmdiag calibrate --ranks {ranks} measures them)"
        )

    def contended(self) -> "MachineProfile | None":
        """This profile's operators at the most threads measured below its own (what a served engine
        computes at while processes beside it hold a core), or None where none were measured."""
        below = [t for t in self.fewer_threads if t.threads < self.threads]
        if not below:
            return None
        return dataclasses.replace(self.at_threads(max(below, key=lambda t: t.threads)), contended_share=0.0)

    def at_threads(self, tables: ThreadTables) -> "MachineProfile":
        """This profile with its operator tables replaced by those measured at `tables.threads`."""
        fields = {name: getattr(tables, name) for name in OPERATOR_FIELDS}
        return dataclasses.replace(self, threads=tables.threads, **fields)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def from_dict(cls, d: dict) -> "MachineProfile":
        if not isinstance(d, dict) or d.get("schema_version") != PROFILE_SCHEMA:
            raise DiagnosisError(f"not a machine profile of schema {PROFILE_SCHEMA} (llmdiag calibrate writes one)")
        try:

            def linear(key: str) -> LinearCost | None:
                return LinearCost(**d[key]) if d.get(key) else None

            return cls(
                name=d["name"],
                source=d["source"],
                dtype_bytes=d["dtype_bytes"],
                roofline=Roofline(**d["roofline"]),
                step_overhead=LinearCost(**d["step_overhead"]),
                collective=CollectiveCost(**d["collective"]),
                matmul=MatmulTable(**d["matmul"]) if d.get("matmul") else None,
                request_overhead_s=d.get("request_overhead_s", 0.0),
                request_overhead_per_running_s=d.get("request_overhead_per_running_s", 0.0),
                request_overhead_per_prompt_token_s=d.get("request_overhead_per_prompt_token_s", 0.0),
                compute_scale=d.get("compute_scale", 1.0),
                contended_share=d.get("contended_share", 0.0),
                step_jitter=StepJitter.from_dict(d["step_jitter"]) if d.get("step_jitter") else None,
                assumptions=list(d.get("assumptions", [])),
                created=d.get("created", ""),
                host=d.get("host") or _measured_on(d.get("assumptions", [])),
                measured_points=d.get("measured_points", {}),
                attention_decode=(
                    DecodeAttentionCost.from_dict(d["attention_decode"]) if d.get("attention_decode") else None
                ),
                attention_prefill=linear("attention_prefill"),
                attention_prefill_table=_attention_table(d),
                elementwise=linear("elementwise"),
                layer_overhead=linear("layer_overhead"),
                threads=d.get("threads", 0),
                cores=d.get("cores", 0),
                fewer_threads=[ThreadTables.from_dict(t) for t in d.get("fewer_threads", [])],
            )
        except (KeyError, TypeError) as exc:
            raise DiagnosisError(f"the machine profile lacks or mistypes a field: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> "MachineProfile":
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise DiagnosisError(f"cannot read the profile {path}: {exc}") from None
        return cls.from_dict(data)
