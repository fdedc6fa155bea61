"""A fleet's own /metrics pages, one per replica (`llmbench sweep --replica-metrics`, or each URL
of `--target URL1,URL2`): read one by one where a router does not aggregate them, then added up
into the one engine-neutral Snapshot a labelled page would give (probes/prom.py), its per_engine
keyed by the replica's index in the list (docs/probes.md).

The sums follow prom.py's rules for several label sets: counts and histograms add up, shares
(MAX_OVER_LABELS: KV usage) take the fullest replica. Counters and histograms are differenced
only over the replicas read at both ends of an interval, each against its own previous page, so a
replica missed by one scrape neither drops the fleet's counters (a false reset) nor adds its whole
history when it comes back: what it counted meanwhile lands in the interval it is read again.
"""

from __future__ import annotations

from collections import Counter

from probes.prom import MAX_OVER_LABELS, PER_ENGINE, Histogram, Snapshot


def fleet_snapshot(pages: dict[str, Snapshot], per_engine: bool = True) -> Snapshot:
    """Replica pages (name -> its snapshot) as one snapshot: values and histograms summed over them
    (shares: the max), per_engine each replica's PER_ENGINE gauges (with per_engine)."""
    snaps = list(pages.values())
    values: dict[str, float] = {}
    for snap in snaps:
        for name, v in snap.values.items():
            if name not in values:
                values[name] = v
            else:
                values[name] = max(values[name], v) if name in MAX_OVER_LABELS else values[name] + v
    histograms: dict[str, Histogram] = {}
    for snap in snaps:
        for name, h in snap.histograms.items():
            total = histograms.setdefault(name, Histogram())
            for le, c in h.buckets.items():
                total.buckets[le] = total.buckets.get(le, 0.0) + c
            total.count += h.count
            total.sum += h.sum
    engines = Counter(s.engine for s in snaps)
    by_name: dict[str, list[tuple[dict[str, str], float]]] = {}
    for snap in snaps:
        for name, samples in snap.by_name.items():
            by_name.setdefault(name, []).extend(samples)
    return Snapshot(
        engine=next(iter(engines)) if len(engines) == 1 else "unknown",
        values=values,
        histograms=histograms,
        metric_count=sum(s.metric_count for s in snaps),
        info=snaps[0].info if snaps else {},
        by_name=by_name,
        per_engine={name: {k: snap.values[k] for k in PER_ENGINE if k in snap.values} for name, snap in pages.items()}
        if per_engine
        else {},
    )


class ReplicaPages:
    """The replicas' pages of one fleet across scrapes: the latest snapshot each gave, and why the
    ones never read failed."""

    def __init__(self, urls: list[str]):
        if not urls:
            raise ValueError("a fleet's pages: at least one URL")
        self.urls = list(urls)
        self.latest: list[Snapshot | None] = [None] * len(urls)  # each replica's last page read
        self.first_error: list[str | None] = [None] * len(urls)

    def scraped(self, fresh: list[Snapshot | None], errors: dict[int, str]) -> tuple[Snapshot, Snapshot | None]:
        """One scrape's pages (None where a replica's failed, `errors` saying why): the fleet's pages
        now summed, and the previous pages of the same replicas summed (None when none was read
        before), for counters' and histograms' deltas."""
        if len(fresh) != len(self.urls):
            raise ValueError(f"{len(fresh)} pages for {len(self.urls)} replicas")
        for i, why in errors.items():
            if self.first_error[i] is None:
                self.first_error[i] = why
        both = [i for i, snap in enumerate(fresh) if snap is not None and self.latest[i] is not None]
        cur = fleet_snapshot(
            {str(i): snap for i, snap in enumerate(fresh) if i in both and snap is not None}, per_engine=False
        )
        prev_pages = {str(i): snap for i in both if (snap := self.latest[i]) is not None}
        prev = fleet_snapshot(prev_pages, per_engine=False) if prev_pages else None
        for i, snap in enumerate(fresh):
            if snap is not None:
                self.latest[i] = snap
        return cur, prev

    def never_read(self) -> list[str]:
        """Each replica none of whose pages was read, in words (the probe's shortfall)."""
        return [
            f"replica {i} ({url}) was never read ({why or 'no scrape reached it'})"
            for i, (url, snap, why) in enumerate(zip(self.urls, self.latest, self.first_error))
            if snap is None
        ]
