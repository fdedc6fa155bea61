"""P99 check: requests routed to a replica that held more work than another one had at that moment.

Replicas equally fast, yet a request sent to the busier one waits behind more work: round robin
does not look at what a replica holds, and against a heavy-tailed length mix (a few requests ask
for hundreds of tokens) it keeps handing requests to a replica still busy with the long ones while
another sits nearly idle. From the records (load_at_send.py), for each request: the tokens its own
replica still had to go when it was sent, and the requests it had in flight, against the lightest
other replica's. It was sent to a *clearly busier* replica when its own held at least BUSIER_FACTOR
times the lightest one's tokens and more than one typical request's worth more (a request's own
prompt plus output, median over the run), or at least MORE_REQUESTS and MORE_SHARE more requests
in flight (a replica busy with many short requests is busier too). A request *waited for a slot*
when its replica already held as many requests as it was ever seen generating at once (its batch
room: max_num_seqs, or a KV cache's worth) while another replica held fewer than its own: the
sharper mechanism, where a few long waits among fast requests make the P99. Whether either
separates the tail from the body, and how much of the tail it explains, is exposure.py's
differential; the one that explains more is named.

The premise is replicas equally fast: where one replica is slower at the same load
(p99.fleet.hot-replica), the work piled up on it because of its slowness, and this check defers.

Where the server probe read each replica (a fleet front's `per_engine`) and most of the scrapes in
which requests waited had another replica with room (per_engine.queue_with_room), the queue itself
is the routing's: the fleet's queueing, admission-limit, KV-capacity and saturation findings are its
consequences and yield to this one (router_queue_yields).
"""

from __future__ import annotations

import numpy as np

from analyzers.probe_series import ProbeSeries
from analyzers.triage.contracts import CONTEXT_SHARE, CheckResult, Finding, failed, passed
from analyzers.triage.exposure import differential, exposed_windows
from analyzers.triage.fleet.load_at_send import FleetLoad
from analyzers.triage.fleet.per_engine import queue_with_room
from analyzers.triage.tail_windows import METRIC_SPANS, TailWindows
from rundir.run_info import TargetInfo
from rundir.table import RequestTable

IMBALANCE_ID, IMBALANCE_TITLE = (
    "p99.fleet.imbalance",
    "requests did not go to a busier replica while another was lighter",
)
# The evidence's `exposure`: which of the two conditions the finding names (reports word them).
SLOT_WAIT, SENT_BUSIER = "waited for a slot", "sent to a busier replica"
BUSIER_FACTOR = 2.0  # its own replica held at least this many times the lightest one's outstanding tokens ...
# ... and at least this many typical requests' tokens more (one request more is what any router adds)
BUSIER_REQUESTS = 1.0
MORE_REQUESTS, MORE_SHARE = 2, 0.5  # or at least 2 and 50% more requests in flight than the lightest
ROOM_SHARE = 0.5  # the queue is the routing's when another replica had room in this share of its scrapes
# The fleet-wide findings of a queue: where the queue formed with room elsewhere, they are the routing's.
QUEUE_FINDINGS = ("p99.sched.queueing", "p99.sched.admission", "p99.sched.kv-capacity", "p99.sched.saturation")


def routing_words(target: TargetInfo) -> str:
    """Who picked each request's replica, and by what policy, as run.json records it (target.lb_policy)."""
    policy = target.lb_policy or "round-robin"
    if target.urls:
        return f"the load generator's {policy} over the URLs"
    if target.kind == "embedded":
        return f"the fleet front's {policy}"
    return "the router in front of the replicas"


def check_imbalance(
    table: RequestTable,
    tails: TailWindows,
    load: FleetLoad,
    routing: str,
    hot_replica: str | None,
    server: ProbeSeries | None = None,
) -> CheckResult:
    start_col, end_col, value_col = METRIC_SPANS[tails.metric]
    df = table.df
    values = df[value_col].to_numpy(float)
    measured = (df["status"] == "ok").to_numpy() & df["in_window"].to_numpy() & np.isfinite(values) & load.named
    if not measured.any():
        return passed(IMBALANCE_ID, "fleet", IMBALANCE_TITLE, "no measured request names its replica")
    own, lightest = load.own(load.outstanding), load.lightest_other(load.outstanding)
    work = df["in_tokens"].to_numpy(float) + df["out_tokens"].to_numpy(float)
    typical = float(np.median(work[measured]))
    count, fewest = load.own(load.in_flight), load.lightest_other(load.in_flight)
    busier = measured & (
        ((own >= BUSIER_FACTOR * lightest) & (own - lightest >= BUSIER_REQUESTS * typical))
        | (count >= fewest + np.maximum(MORE_REQUESTS, MORE_SHARE * fewest))
    )
    waited = measured & load.waited_for_a_slot()
    levels = table.level_rows()
    # Two ways the routing makes a request slow: its replica's batch was full while another's was not
    # (it waited for a slot), or it joined far more work than another replica held (slower steps, a
    # longer queue). The first is rarer and sharper: a tail of a few long waits among fast requests
    # is its, and the broad "busier" condition, shared with much of the body, would dilute it.
    by_busier = differential(values, levels, measured, busier)
    by_slot = differential(values, levels, measured, waited)
    slot_first = by_slot.separates and (not by_busier.separates or by_slot.attributable > by_busier.attributable)
    diff = by_slot if slot_first else by_busier
    out = df["out_tokens"].to_numpy(float)[measured]
    mix = float(np.percentile(out, 99) / max(np.median(out), 1.0))
    evidence = dict(
        diff.evidence(),
        exposure=SLOT_WAIT if slot_first else SENT_BUSIER,
        busier_share=round(float(busier[measured].mean()), 3),
        waited_for_a_slot_share=round(float(waited[measured].mean()), 3),
        tail_waited_for_a_slot=round(by_slot.tail_exposed, 3),
        replica_slots=[int(x) for x in load.slots],
        typical_request_tokens=typical,
        output_tokens_p99_over_median=round(mix, 1),
        routing=routing,
    )
    if not diff.separates:
        return passed(
            IMBALANCE_ID,
            "fleet",
            IMBALANCE_TITLE,
            f"{evidence['busier_share']:.0%} of the requests went to a clearly busier replica than the "
            f"lightest; they make {diff.tail_exposed:.0%} of the tail vs {diff.body_exposed:.0%} of the body; "
            f"{by_slot.tail_exposed:.0%} of the tail and {by_slot.body_exposed:.0%} of the body waited for a "
            "slot while another replica had one",
            **evidence,
        )
    if hot_replica is not None:
        return passed(
            IMBALANCE_ID,
            "fleet",
            IMBALANCE_TITLE,
            f"requests sent to a busier replica are the tail, but replica {hot_replica} is slower at the "
            "same load (p99.fleet.hot-replica): the work piled up on it because it is slow",
            **evidence,
        )
    tail_rows = diff.exposed_tail_rows
    evidence.update(
        tail_own_outstanding_median=float(np.median(own[tail_rows])),
        tail_lightest_outstanding_median=float(np.median(lightest[tail_rows])),
        tail_own_in_flight_median=float(np.median(count[tail_rows])),
        tail_lightest_in_flight_median=float(np.median(fewest[tail_rows])),
    )
    room = queue_with_room(server, load.replicas, tails.span)
    room_words = ""
    if room is not None and room.waiting_scrapes:
        evidence.update(
            queue_scrapes=room.waiting_scrapes,
            queue_with_room_elsewhere=room.with_room,
            queue_with_room_elsewhere_share=round(room.share, 3),
        )
        room_words = (
            f"; requests waited on one replica while another had room in {room.with_room} of the "
            f"{room.waiting_scrapes} scrapes with a queue"
        )
    mix_words = f"; the output lengths are heavy-tailed (P99 {mix:.0f}x the median)" if mix >= 4 else ""
    if slot_first:
        slots = sorted({int(x) for x in load.slots})
        title = (
            f"requests waited for a slot on one replica while another had one free ({routing}): "
            f"{round(diff.tail_exposed * diff.n_tail)} of the {diff.n_tail} slowest {tails.metric.upper()}s were "
            f"sent to a replica already running as many requests as it ever ran at once "
            f"({' or '.join(map(str, slots))}), while another ran fewer than its own{mix_words}{room_words}"
        )
    else:
        title = (
            f"requests went to a busier replica while another was lighter ({routing}): "
            f"{round(diff.tail_exposed * diff.n_tail)} of the {diff.n_tail} slowest {tails.metric.upper()}s were "
            f"sent to a replica holding a median {evidence['tail_own_in_flight_median']:.0f} requests and "
            f"{evidence['tail_own_outstanding_median']:,.0f} outstanding tokens while another held "
            f"{evidence['tail_lightest_in_flight_median']:.0f} and "
            f"{evidence['tail_lightest_outstanding_median']:,.0f}{mix_words}{room_words}"
        )
    if diff.with_s is not None and diff.without_s is not None and diff.without_s < diff.with_s:
        title += (
            f"; without them, {diff.level_id}'s {tails.metric.upper()} P{diff.quantile:g} would be "
            f"{diff.without_s * 1000:.0f} ms instead of {diff.with_s * 1000:.0f} ms"
        )
    starts, ends = df[start_col].to_numpy(float), df[end_col].to_numpy(float)
    finding = Finding(
        IMBALANCE_ID,
        "fleet",
        "high" if diff.attributable >= 0.6 else "medium",
        title,
        evidence,
        exposed_windows(starts, ends, tail_rows),
        len(tails.spikes),
        _next_step(routing),
        kind="differential",
        tail_share=diff.attributable,
    )
    return failed(finding, IMBALANCE_TITLE, title)


def router_queue_yields(findings: list[Finding]) -> None:
    """A queue that formed on one replica while another had room is the routing's: the fleet-wide
    findings of that queue explain none of the tail beside a separating imbalance finding."""
    routed = [
        f
        for f in findings
        if f.check_id == IMBALANCE_ID
        and (f.tail_share or 0.0) >= CONTEXT_SHARE
        and (f.evidence.get("queue_with_room_elsewhere_share") or 0.0) >= ROOM_SHARE
    ]
    if not routed:
        return
    for f in findings:
        if f.check_id in QUEUE_FINDINGS:
            f.tail_share = 0.0
            f.evidence["queue_was_the_routing"] = IMBALANCE_ID


def _next_step(routing: str) -> str:
    if "least-outstanding" in routing:
        return (
            "least-outstanding counts a replica's requests, not what they still have to generate: a "
            "token-aware router weighs outstanding tokens (llm-d's endpoint picker scores replicas by queue "
            "depth and KV cache use); then sweep again and `llmbench compare` the runs"
        )
    return (
        "route by load, not in turn: `--lb-policy least-outstanding` (`llmbench serve --data-parallel-size N`, "
        "or `llmbench sweep` over --target URL1,URL2), or a token-aware router that weighs what each replica "
        "still has to generate (llm-d's endpoint picker scores replicas by queue depth and KV cache use); then "
        "sweep again and `llmbench compare` the runs"
    )
