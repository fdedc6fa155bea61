"""Runs side by side as curves (`llmbench report --runs`): each run's levels as points of its
throughput–latency curve and of the per-user vs per-replica throughput frontier, the way
InferenceMAX-style dashboards compare deployments (docs/reports.md, "Runs together").

- per-user output tok/s = 1 / TPOT P50: the pace one stream sees once its first token is out
  ("interactivity"); levels whose requests had one token each have none;
- per-replica output tok/s = the level's output tok/s / the target's replicas (run.json
  `target.replicas`, 1 unless the run says otherwise).

A run with several series (input and output lengths, closed and open loop) gives one curve each.
Levels that measured nothing (no successful request in the window) are no point on any curve; a
level that is no measurement (analyzers.validity: the client fell behind, cut short, ...) is a
point that says why, which the figures leave out (its latencies are not the server's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from analyzers.stats.latency import LevelStats
from analyzers.stats.scaling import series_of
from analyzers.summary import RunSummary
from analyzers.validity import INVALID_PREFIX
from rundir import RunInfo


@dataclass(frozen=True)
class CurvePoint:
    level_id: str
    load: float  # concurrency, or request rate (req/s)
    output_tok_s: float  # the whole target's
    per_replica_tok_s: float
    per_user_tok_s: float | None  # 1 / TPOT P50
    ttft_p99_s: float | None
    tpot_p95_s: float | None
    slo_met: bool | None
    invalid: str | None = None  # why the level is no measurement (analyzers.validity): not plotted


@dataclass
class RunCurve:
    run_id: str
    path: str
    model: str
    workload: str  # the workload's kind, its dataset, the series' lengths
    series: str  # "concurrency · in 128 · out 64"
    replicas: int
    status: str
    points: list[CurvePoint] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"a target has at least one replica, got {self.replicas}")

    @property
    def plotted(self) -> list[CurvePoint]:
        """The points a figure draws: the levels that are a measurement."""
        return [p for p in self.points if p.invalid is None]

    @property
    def closed_loop(self) -> bool:
        return self.series.startswith("concurrency")

    @property
    def label(self) -> str:
        """What the curve is, for a legend: runs of different models or workloads plotted together stay apart."""
        replicas = f" · {self.replicas} replicas" if self.replicas != 1 else ""
        return f"{self.run_id} · {self.model} · {self.workload} · {self.series}{replicas}"


def _workload(info: RunInfo) -> str:
    w = info.sweep.workload
    kind = w.kind.replace("_", "-")
    dataset = w.dataset_path
    return f"{kind} {Path(dataset).name}" if dataset else kind


def _point(lv: LevelStats, replicas: int) -> CurvePoint:
    tpot_p50 = lv.tpot.p.get("p50")
    invalid = next((n[len(INVALID_PREFIX) :] for n in lv.notes if n.startswith(INVALID_PREFIX)), None)
    return CurvePoint(
        level_id=lv.level_id,
        load=lv.load,
        output_tok_s=lv.output_tok_s,
        per_replica_tok_s=lv.output_tok_s / replicas,
        per_user_tok_s=1.0 / tpot_p50 if tpot_p50 else None,
        ttft_p99_s=lv.ttft.p.get("p99"),
        tpot_p95_s=lv.tpot.p.get("p95"),
        slo_met=lv.slo_met,
        invalid=invalid,
    )


def curves_of(summary: RunSummary, path: str = "") -> list[RunCurve]:
    """A summarized run's curves, one per series, points in load order."""
    info = summary.info
    replicas = info.target.replicas
    measured = [lv for lv in summary.levels if lv.n_ok and lv.n_in_window]
    return [
        RunCurve(
            run_id=info.run_id,
            path=path,
            model=str(info.target.model or info.target.url or "?"),
            workload=_workload(info),
            series=key,
            replicas=replicas,
            status=info.status,
            points=[_point(lv, replicas) for lv in group],
        )
        for key, group in series_of(measured).items()
    ]
