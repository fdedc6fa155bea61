"""P99 check: one replica of the fleet is the tail because it is slower than the others at the same load.

Its own noisy neighbour, a smaller KV cache, another build: a replica that is slower makes its
requests the tail. Two things must hold, from what each request lived through:

- the tail concentrates on it beyond its share of the requests: being served by it separates the
  tail from the body (exposure.py's differential, whose attributable share is what the finding
  explains);
- it is slower at comparable load (same_load.py): its latency over the others' at the same number
  of requests in flight is at least HOT_RATIO. A replica merely busier (a router that sent it more
  work) is as fast as the others at its load; that is p99.fleet.imbalance's case, not this one.
  Its load is its own doing when it was handed no heavier requests than the others (its requests'
  tokens, prompt and output, at most HEAVIER times theirs): then the others' trend may be read
  beyond the loads they carried. A replica handed heavier requests may have run out of room where
  the others never went: it is compared only at loads they had, and where it never met them, its
  slowness cannot be told from its load (the imbalance check asks about the routing). Where the
  comparison rested on the others' trend far beyond their loads (a closed loop driven in turn piles
  the users onto the slow replica), or where it holds (a replica that queues is slow by holding
  more, which equal holdings hide), Little's law answers instead: sent no more requests and no
  heavier ones, a replica holds more in flight only by keeping each longer (residence.py). And sent
  alike, a replica that queued behind its own full KV cache where no other did, in a cache holding
  fewer requests than each other's, has less room by its own scheduler's accounting (own_queue.py):
  the latency comparisons need many requests to see what its gauges show directly, and the
  fleet-wide findings of that queue yield to it.

Where the server probe read each replica (a fleet front's `per_engine`), the finding says what its
KV cache and queue did beside the others'.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from analyzers.probe_series import ProbeSeries
from analyzers.triage.contracts import CheckResult, Finding, failed, passed
from analyzers.triage.exposure import MIN_TAIL, Differential, differential, exposed_windows
from analyzers.triage.fleet.concentration import ReplicaShare, replica_shares, tail_mask
from analyzers.triage.fleet.load_at_send import FleetLoad, replica_label
from analyzers.triage.fleet.own_cores import OWN_CORES_KEY, cpu_wait_words, replica_cpu_wait
from analyzers.triage.fleet.own_queue import OWN_QUEUE_KEY
from analyzers.triage.fleet.own_witness import HOT_ID, own_witness
from analyzers.triage.fleet.per_engine import gauges_words, replica_gauges
from analyzers.triage.fleet.residence import HEAVIER, residence
from analyzers.triage.fleet.same_load import SameLoad, same_load
from analyzers.triage.fleet.tail_episodes import tail_episodes
from analyzers.triage.fleet.work import work_seconds
from analyzers.triage.tail_windows import METRIC_SPANS, TailWindows
from rundir.table import RequestTable

HOT_TITLE = "no replica is slower than the others at the same load"
HOT_RATIO = 1.5  # at the same load, at least this many times the others' latency
MIN_MATCHED = 0.3  # handed heavier work (residence.HEAVIER), at least this share of its requests must meet
# loads the others had


def check_hot_replica(
    table: RequestTable,
    tails: TailWindows,
    load: FleetLoad,
    server: ProbeSeries | None,
    urls: list[str] | None = None,
    host: ProbeSeries | None = None,
) -> CheckResult:
    start_col, end_col, value_col = METRIC_SPANS[tails.metric]
    df = table.df
    values = df[value_col].to_numpy(float)
    measured = (df["status"] == "ok").to_numpy() & df["in_window"].to_numpy() & np.isfinite(values) & load.named
    rows_by_level = table.level_rows()
    tail = tail_mask(values, rows_by_level, measured)
    shares = replica_shares(load.replica, load.replicas, measured, tail)
    candidates = [s for s in shares if s.tail >= MIN_TAIL]
    if not candidates:
        return passed(HOT_ID, "fleet", HOT_TITLE, f"no replica holds {MIN_TAIL} or more of the tail requests")
    top = max(candidates, key=lambda s: s.concentration)
    r = load.replicas.index(top.replica)
    mine = measured & (load.replica == r)
    diff = differential(values, rows_by_level, measured, mine)
    spread = (
        f"replica {top.replica} served {top.tail_share:.0%} of the tail and {top.request_share:.0%} of the requests"
    )
    own = load.own(load.in_flight)
    others = measured & (load.replica != r) & (load.replica >= 0)
    work = work_seconds(df, measured)
    theirs = float(np.mean(work[others])) if others.any() else 0.0
    heavier = float(np.mean(work[mine])) / theirs if theirs > 0 else 1.0
    gauges = replica_gauges(server, load.replicas, tails.span)
    waits = replica_cpu_wait(host, load.replicas, tails.span)
    starts, ends = df[start_col].to_numpy(float), df[end_col].to_numpy(float)
    episodes = tail_episodes(starts, ends, tail, load.replica, len(load.replicas))
    witness, witnessed = own_witness(gauges, waits, episodes, heavier, top, shares, r)
    # What slows it only now and then (its own queue, a neighbour on its cores, whatever made its tail's
    # episodes) leaves its median request as fast: sent alike, the tail concentrating on it is enough.
    if not (diff.separates or (witness is not None and diff.concentrates)):
        return passed(
            HOT_ID,
            "fleet",
            HOT_TITLE,
            f"being served by one replica does not separate the tail from the "
            f"body: {spread}, its requests' latency {diff.effect or 0.0:.2f}x the others' median",
            **_shares_evidence(shares),
        )
    slow = same_load(values, own, mine, others, extrapolate=heavier < HEAVIER)
    if heavier >= HEAVIER and (slow is None or slow.matched_share < MIN_MATCHED):
        return passed(
            HOT_ID,
            "fleet",
            HOT_TITLE,
            f"{spread}, but it was handed {heavier:.1f}x the others' work per request (tokens at the run's prefill "
            f"and decode paces) and carried loads "
            f"they seldom had ({float(np.median(own[mine])):.0f} requests in flight against "
            f"{float(np.median(own[others])):.0f}): busier, not slower as far as these records tell "
            "(p99.fleet.imbalance asks why)",
            heavier_requests=round(heavier, 2),
            **_shares_evidence(shares),
        )
    stay = residence(df["e2e_s"].to_numpy(float), measured, mine, others, heavier, top, shares)
    only_residence = slow is None and stay is not None
    if slow is None and stay is not None:  # (only_residence, spelled out for the type checker)
        # The others held too few requests at any one load to compare with (the slow replica held
        # nearly all of them): Little's law still compares the two.
        slow = SameLoad(
            stay.ratio,
            0.0,
            float(np.median(own[mine])),
            float(np.median(own[others])),
            float(np.median(values[mine])),
            float(np.median(values[others])),
        )
    if slow is None:
        return passed(
            HOT_ID,
            "fleet",
            HOT_TITLE,
            f"{spread}, but the other replicas' loads give nothing to set "
            "its latency against (too few of their requests at any one load)",
            **_shares_evidence(shares),
        )
    evidence = dict(
        diff.evidence(),
        replica=top.replica,
        **_shares_evidence(shares),
        **slow.evidence(),
        heavier_requests=round(heavier, 2),
        **witnessed,
    )
    if waits:
        evidence["replica_cpu_wait_share"] = {k: round(v, 3) for k, v in waits.items()}
    if top.replica in gauges:
        evidence["replica_gauges"] = gauges[top.replica].evidence()
        evidence["others_gauges"] = {k: g.evidence() for k, g in gauges.items() if k != top.replica}
    if stay is not None and (slow.matched_share < MIN_MATCHED or stay.holds or witnessed[OWN_QUEUE_KEY]):
        # Its load was its own doing (no more requests, no heavier ones), so more in flight is its
        # slowness: Little's law says so whatever the comparison at the same load read. That
        # comparison rests on the others' trend beyond what they carried, and a replica that queues
        # (a small KV cache) is slow by holding more, which comparing at equal holdings hides.
        evidence["residence_per_work_vs_others"] = round(stay.ratio, 2)
        evidence["residence_p_value"] = round(stay.p_value, 4)
    if only_residence or slow.ratio < HOT_RATIO:
        if stay is not None and stay.holds:
            slow = dataclasses.replace(slow, ratio=stay.ratio)
            evidence["slowness_from"] = "residence"
        elif witness is not None:
            evidence["slowness_from"] = witness
        else:
            held = (
                f"a median of {slow.its_in_flight:.0f} requests in flight against "
                f"{slow.others_in_flight:.0f} on the others"
            )
            how = (
                f"its requests stayed {stay.ratio:.2f}x as long as the others' ({held}), not clearly more "
                f"than which replica served which request explains (p={stay.p_value:.2f})"
                if only_residence and stay is not None
                else f"at the load it carried ({held}) it was as fast as they were ({slow.ratio:.2f}x)"
            )
            return passed(
                HOT_ID,
                "fleet",
                HOT_TITLE,
                f"{spread}, but {how}: busier, not slower (p99.fleet.imbalance asks why)",
                **evidence,
            )
    other_names = [s.replica for s in shares if s.replica != top.replica]
    said = [
        gauges_words(gauges[top.replica], [g for k, g in gauges.items() if k != top.replica])
        if top.replica in gauges
        else None,
        cpu_wait_words(waits, top.replica) if witnessed[OWN_CORES_KEY] else None,
    ]
    name = replica_label(top.replica, urls or [])
    how = _how(slow, evidence.get("slowness_from"), tails.metric.upper())
    title = (
        f"{name} is the {tails.metric.upper()} tail: it served {top.tail_share:.0%} of the tail "
        f"and {top.request_share:.0%} of the requests, and {how}"
        + "".join(f"; {words}" for words in said if words)
        + _counterfactual(diff, tails.metric, top.replica)
    )
    finding = Finding(
        HOT_ID,
        "fleet",
        "high" if diff.attributable >= 0.6 else "medium",
        title,
        evidence,
        exposed_windows(starts, ends, diff.exposed_tail_rows),
        len(tails.spikes),
        _next_step(name, other_names, bool(witnessed[OWN_CORES_KEY])),
        kind="differential",
        tail_share=diff.attributable,
    )
    return failed(finding, HOT_TITLE, title)


def _how(slow: SameLoad, slowness_from: str | None, metric: str) -> str:
    """What makes it slower, as the finding says it."""
    if slowness_from == "residence":
        return (
            f"sent no more requests and no heavier ones, each stayed on it {slow.ratio:.1f}x as long as the "
            f"others' did on theirs, so it held a median of {slow.its_in_flight:.0f} in flight vs "
            f"{slow.others_in_flight:.0f} (median {metric} {_ms(slow.its_median_s)} vs "
            f"{_ms(slow.others_median_s)})"
        )
    if slowness_from == "its tail":
        return (
            f"sent no more requests and no heavier ones, it made the tail's episodes far beyond its share though "
            f"its median request was about as fast (median {metric} {_ms(slow.its_median_s)} with "
            f"{slow.its_in_flight:.0f} in flight vs {_ms(slow.others_median_s)} with {slow.others_in_flight:.0f}): "
            "something slows it now and then (a neighbour on its host, a throttled GPU, a pause)"
        )
    if slowness_from == "own cores":
        return (
            f"sent no more requests and no heavier ones, its own server's threads waited for a CPU where the "
            f"others' did not (median {metric} {_ms(slow.its_median_s)} with {slow.its_in_flight:.0f} in "
            f"flight vs {_ms(slow.others_median_s)} with {slow.others_in_flight:.0f})"
        )
    if slowness_from == "own queue":
        return (
            f"sent no more requests and no heavier ones, requests waited behind its own full KV cache where "
            f"the others' did not wait (median {metric} {_ms(slow.its_median_s)} with "
            f"{slow.its_in_flight:.0f} in flight vs {_ms(slow.others_median_s)} with {slow.others_in_flight:.0f})"
        )
    return (
        f"at the same load its {metric} was {slow.ratio:.1f}x the others' (median "
        f"{_ms(slow.its_median_s)} with {slow.its_in_flight:.0f} in flight vs {_ms(slow.others_median_s)} "
        f"with {slow.others_in_flight:.0f})"
    )


def _shares_evidence(shares: list[ReplicaShare]) -> dict:
    return {
        "replica_shares": {
            s.replica: {
                "requests": s.requests,
                "request_share": round(s.request_share, 3),
                "tail": s.tail,
                "tail_share": round(s.tail_share, 3),
            }
            for s in shares
        }
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _counterfactual(diff: Differential, metric: str, replica: str) -> str:
    if diff.with_s is None or diff.without_s is None or diff.without_s >= diff.with_s:
        return ""
    return (
        f"; without replica {replica}, {diff.level_id}'s {metric.upper()} P{diff.quantile:g} would be "
        f"{_ms(diff.without_s)} instead of {_ms(diff.with_s)}"
    )


def _next_step(replica: str, others: list[str], own_cores: bool = False) -> str:
    if own_cores:  # its own threads waited for a CPU: what runs on its cores comes first
        return (
            f"move the other processes off {replica}'s cores, or pin it to cores of its own (taskset, cpuset; "
            "p99.host.cpu names the busiest processes), then sweep again; meanwhile a load-aware router "
            "(--lb-policy least-outstanding) sends it less"
        )
    return (
        f"look at {replica} itself, not the fleet: set its engine arguments (KV cache size: "
        "--num-gpu-blocks-override, --gpu-memory-utilization; --max-num-seqs), its build and its host's other "
        f"processes beside replica {', '.join(others)}'s; take it out of rotation or make it match, then sweep "
        "again; meanwhile a load-aware router (--lb-policy least-outstanding) sends it less"
    )
