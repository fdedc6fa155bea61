"""The fleet front's /metrics: every replica's own page, each series labelled with the replica's
index, plus the front's counters.

The label is `engine="<index>"`, the one vLLM's data-parallel deployments put on every series
(vllm/v1/metrics/loggers.py: labelnames ["model_name", "engine"]), so a probe that reads a vLLM
DP server reads a refengine fleet the same way: summing over label sets gives the fleet, one
label value gives one replica. A replica whose page cannot be read contributes no series and
`refengine:dp_replica_up{engine=...} 0`.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from refengine.server.dp_policy import ReplicaLoad

REPLICA_LABEL = "engine"  # vLLM's label for a data-parallel engine's index


@dataclass(frozen=True)
class ReplicaPage:
    """One replica's scrape: its /metrics text, or None when it could not be read."""

    index: int
    text: str | None
    healthy: bool

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValueError(f"replica index must be >= 0, got {self.index}")


def labelled_families(pages: list[ReplicaPage]) -> list[Metric]:
    """The replicas' families merged by name, every sample with the replica's label added."""
    merged: dict[str, Metric] = {}
    for page in pages:
        if page.text is None:
            continue
        for family in text_string_to_metric_families(page.text):
            out = merged.get(family.name)
            if out is None:
                out = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            for s in family.samples:
                labels = {**s.labels, REPLICA_LABEL: str(page.index)}
                out.add_sample(s.name, labels, s.value, s.timestamp, s.exemplar)
    return list(merged.values())


def front_families(loads: list[ReplicaLoad], pages: list[ReplicaPage]) -> list[Metric]:
    """The front's own series: what it routed where, what is in flight, which replicas are up."""
    routed = CounterMetricFamily(
        "refengine:dp_requests_routed", "Requests the data-parallel front sent to each replica.", labels=[REPLICA_LABEL]
    )
    in_flight = GaugeMetricFamily(
        "refengine:dp_requests_in_flight",
        "Requests routed to each replica whose response has not ended (what least-outstanding balances).",
        labels=[REPLICA_LABEL],
    )
    up = GaugeMetricFamily(
        "refengine:dp_replica_up",
        "1 while the replica's process runs and its /health answers 200.",
        labels=[REPLICA_LABEL],
    )
    healthy = {p.index: p.healthy for p in pages}
    for i, load in enumerate(loads):
        routed.add_metric([str(i)], load.routed)
        in_flight.add_metric([str(i)], load.in_flight)
        up.add_metric([str(i)], 1.0 if healthy.get(i) else 0.0)
    return [routed, in_flight, up]


class _Families:
    def __init__(self, families: list[Metric]):
        self.families = families

    def collect(self):
        return iter(self.families)


def render(loads: list[ReplicaLoad], pages: list[ReplicaPage]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(labelled_families(pages) + front_families(loads, pages)))
    return generate_latest(registry)
