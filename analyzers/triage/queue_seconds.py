"""A queue explains no more of the tail than the seconds it held requests, by the server's own count.

`p99.sched.queueing` (analyzers/triage/server.py) reads the server's waiting gauge at each scrape's
instant and claims the spike windows where it read a request waiting: its share of the tail is the
tail's latency in those windows (tail_shares.py). A gauge read at an instant can overstate a queue:
a server that had stopped reads the requests that arrived meanwhile at its next scrape, and a busy
server of short steps has a request waiting for the current step at many instants. Where every
scrape interval overlaps a spike window there is no calm to contrast the gauge with at all. One
such run (a c8 level of tiny-test whose server was stopped three times for 0.2-0.4 s) read 1.0
waiting in the spikes, and the queue outranked the pauses; the server's queue-time histogram said
every request, in the spikes or not, waited 2.5-3 ms.

The histogram's sum is exact (docs/probes.md: `queue_time_mean_s` is sum/count): requests that
waited in the queue longer than the level's typical interval's requests did added those seconds,
and no more, to the tail requests' latency above their level's median (the median request waited
the typical time too). So the queue's share of the spike requests in its windows is scaled by
(queued seconds above typical) / (the spike requests' latency above the median there), when that
is below 1. A standing level's requests are measured against their baseline (tail_shares.py), and
its queue is judged by the standing checks: the share of its requests is left as it is. TPOT holds no queue time;
a run whose server exported no queue-time histogram is left as it is.
"""

from __future__ import annotations

import numpy as np

from analyzers.triage.contracts import Finding
from analyzers.triage.evidence import SampleSplit
from analyzers.triage.levels import LevelLoad
from analyzers.triage.server import QUEUE_ID
from analyzers.triage.tail_shares import TailExcess
from analyzers.triage.tail_windows import overlaps


def queue_bounded_by_its_seconds(
    findings: list[Finding], tail: TailExcess, metric: str, levels: list[LevelLoad], server: SampleSplit | None
) -> None:
    queues = [f for f in findings if f.check_id == QUEUE_ID and f.tail_share]
    if not queues or metric == "tpot" or server is None:
        return
    if not (server.has("queue_time_mean_s") and server.has("queue_time_count")):
        return
    spiking = ~np.isin(tail.level_ids, [lv.level_id for lv in levels if lv.standing])
    weights = tail.weights()
    queued = queued_seconds_above_typical(server, levels)
    for f in queues:
        mine = spiking & overlaps(tail.starts, tail.ends, f.explains)
        claimed = float(tail.seconds[mine].sum())
        if claimed <= 0 or queued >= claimed:
            continue
        bound = queued / claimed
        f.tail_share = max(0.0, (f.tail_share or 0.0) - float(weights[mine].sum()) * (1.0 - bound))
        f.evidence |= dict(queue_seconds_above_typical_s=queued, tail_seconds_above_median_s=claimed)
        f.title += (
            f"; but by the server's own count its queue held those requests {queued:.3g} s longer than the "
            f"typical interval's, against {claimed:.3g} s of their latency above the median: the queue "
            f"explains at most {bound:.0%} of it"
        )


def queued_seconds_above_typical(server: SampleSplit, levels: list[LevelLoad]) -> float:
    """Seconds the requests counted in the spike intervals waited beyond the queue time of their
    level's typical interval (the median of its intervals' means), summed over the levels that are
    not standing. An interval belongs to the level whose window holds its midpoint."""
    counts = np.nan_to_num(server.values("queue_time_count"))
    means = server.values("queue_time_mean_s")
    counted = (counts > 0) & np.isfinite(means)
    middle = (server.start + server.end) / 2
    total = 0.0
    for lv in levels:
        if lv.standing:
            continue
        mine = counted & (middle >= lv.window.start) & (middle <= lv.window.end)
        if not mine.any():
            continue
        typical = float(np.median(means[mine]))
        over = mine & server.spike
        total += float(np.sum(counts[over] * np.maximum(means[over] - typical, 0.0)))
    return total
