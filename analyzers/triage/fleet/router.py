"""P99 check: the router in front of the replicas adds time of its own.

A request sent to a router (llm-d's gateway, a LiteLLM or nginx proxy, a vendor's load balancer)
waits in it before a replica sees it: its own queue, a connection pool to the replicas that opens a
new connection per request, TLS, retries, health checks. None of that is on the replicas' clocks,
so it shows as the gap between the client's TTFT and the replicas' own (router_gap.py, per level).
The check runs where the server probe read pages *behind* the URL the client sent to
(`--replica-metrics`, pages other than the target's own), whether or not the records name a replica:
a foreign router sets no replica header.

A level's gap is the router's when it is a material part of that level's TTFT: at least MIN_GAP_S
and GAP_SHARE of the client's mean (or, where the router delays some requests far more than others,
of the client's P99 by what it stands above the replicas'). A gap that every request paid (the
median request paid most of it) is a constant added to each request: it lifts P50 as much as P99,
a cause of TTFT's level rather than of the tail's spread, and the finding says so. Such a finding is
`kind: added`: its share of the tail is the share of the tail requests' latency (each level's
slowest 10%, exposure.py's tail) that the router added, so it ranks above the causes of the spread
only where it is most of what the slow requests waited (docs/diagnosis.md, "The router's own time").
"""

from __future__ import annotations

from urllib.parse import urlparse

import numpy as np

from analyzers.probe_series import ProbeSeries
from analyzers.triage.contracts import CheckResult, Finding, failed, passed, unchecked
from analyzers.triage.fleet.concentration import tail_mask
from analyzers.triage.fleet.router_gap import LevelGap, Range, level_gaps
from analyzers.triage.tail_windows import METRIC_SPANS, TailWindows
from rundir.run_info import TargetInfo
from rundir.table import RequestTable

ROUTER_ID, ROUTER_TITLE = "p99.fleet.router", "the router adds no time of its own"
# The smallest gap that is the router's: above what the replica's own front end does before its TTFT
# clock starts (HTTP parsing, tokenization: a few ms for short prompts), which the gap also holds.
# Below MIN_EXCESS_S["ttft"] (50 ms, what a level must stand above its baseline to be a standing
# tail), because the gap is a paired measurement, the same requests on two clocks, where a standing
# level sets two levels' medians against each other with the load's noise between them.
MIN_GAP_S = 0.020
GAP_SHARE = 0.25  # ... and at least this share of the level's client TTFT: a material part of it
# The standing-tail verdicts of "time outside the server" that are the router's where it found its gap.
OUTSIDE_FINDINGS = ("p99.net.path", "p99.sched.saturation")
NEXT_STEP = (
    "look at the router itself: its own metrics and logs (time before it forwards a request), its "
    "connection pool to the replicas (a new connection per request, a pool that runs dry), TLS, "
    "retries and health checks; then sweep one replica directly (`llmbench sweep --target <replica URL>`) "
    "and `llmbench compare` the two runs"
)


def not_behind_a_router(target: TargetInfo) -> str | None:
    """Why the server probe's pages are not behind the URL the client sent to (None: they are)."""
    if target.urls:
        return "no router: the client drove the replicas' URLs itself (--target URL1,URL2)"
    if target.kind == "embedded":
        return "no router's pages: the bundled engine (or its fleet's front) serves its engines' own page at its URL"
    if not target.replica_metrics:
        return (
            "no replica pages behind the target: the server probe read the target's own /metrics "
            "(a router's replicas: --replica-metrics URL,...)"
        )
    if {urlparse(p).netloc for p in target.replica_metrics} == {urlparse(target.url or "").netloc}:
        return "no router: the replica pages the server probe read are the target's own"
    return None


def check_router(
    table: RequestTable,
    tails: TailWindows,
    target: TargetInfo,
    server: ProbeSeries | None,
    tcp: ProbeSeries | None = None,
) -> CheckResult:
    if tails.metric == "tpot":
        return unchecked(
            ROUTER_ID,
            "fleet",
            ROUTER_TITLE,
            "a router's time comes before the first token (TTFT, E2E); TPOT is measured after it",
        )
    why = not_behind_a_router(target)
    if why is not None:
        return unchecked(ROUTER_ID, "fleet", ROUTER_TITLE, why)
    if server is None:
        return unchecked(
            ROUTER_ID,
            "fleet",
            ROUTER_TITLE,
            "no server probe read the replicas' pages (llmbench sweep --probes server --replica-metrics URL,...)",
        )
    gaps, skipped = level_gaps(table, server, tcp)
    if not gaps:
        return unchecked(ROUTER_ID, "fleet", ROUTER_TITLE, "no level to judge: " + "; ".join(skipped))
    evidence: dict = {
        "router": target.url,
        "replica_pages": list(target.replica_metrics),
        "levels": {g.level_id: g.evidence() for g in gaps},
    }
    if skipped:
        evidence["levels_not_judged"] = skipped
    found = [g for g in gaps if _material(g)]
    if not found:
        top = max(gaps, key=lambda g: g.gap_s)
        rtt = f", less the {_ms(top.rtt_s)} round trip to the router" if top.rtt_s is not None else ""
        return passed(
            ROUTER_ID,
            "fleet",
            ROUTER_TITLE,
            f"the client's TTFT is at most {_ms(max(top.gap_s, 0.0))} above the replicas' own "
            f"({top.level_id}: {_ms(top.client_mean_s)} vs {_ms(top.replicas_mean_s)} mean{rtt}), under "
            f"{_ms(MIN_GAP_S)} or {GAP_SHARE:.0%} of it",
            **evidence,
        )
    evidence["router_levels"] = [g.level_id for g in found]
    share = _tail_share(table, tails.metric, gaps)
    evidence["tail_latency_added"] = round(share, 3)
    title = _title(max(found, key=lambda g: g.gap_s), found)
    finding = Finding(
        ROUTER_ID,
        "fleet",
        "high" if share >= 0.6 else "medium",
        title,
        evidence,
        [g.window for g in found],
        len(tails.spikes),
        NEXT_STEP,
        kind="added",
        tail_share=share,
    )
    return failed(finding, ROUTER_TITLE, title)


def _material(g: LevelGap) -> bool:
    if g.gap_s >= MIN_GAP_S and g.gap_s >= GAP_SHARE * g.client_mean_s:
        return True
    p99 = g.p99_gap
    return g.shape == "uneven" and p99 is not None and p99[0] >= MIN_GAP_S and p99[0] >= GAP_SHARE * g.client_p99_s


def _tail_share(table: RequestTable, metric: str, gaps: list[LevelGap]) -> float:
    """The share of the tail requests' latency (each level's slowest 10%) that the router added; a
    level whose gap could not be judged counts as none."""
    df = table.df
    values = df[METRIC_SPANS[metric][2]].to_numpy(float)
    measured = (df["status"] == "ok").to_numpy() & df["in_window"].to_numpy() & np.isfinite(values)
    rows_by_level = table.level_rows()
    tail = tail_mask(values, rows_by_level, measured)
    added = np.zeros(values.shape)
    for g in gaps:
        added[rows_by_level[g.level_id]] = g.added_to_tail_s
    v = values[tail]
    if not v.size:
        return 0.0
    return float(np.mean(np.clip(added[tail], 0.0, v) / np.maximum(v, 1e-9)))


def _title(g: LevelGap, found: list[LevelGap]) -> str:
    rtt = f", after the {_ms(g.rtt_s)} round trip to it" if g.rtt_s is not None else ""
    sides = (
        f"replicas' own TTFT mean {_ms(g.replicas_mean_s)}, at the client {_ms(g.client_mean_s)} ({g.level_id}{rtt})"
    )
    others = [o for o in found if o is not g]
    also = (
        f"; also {', '.join(o.level_id for o in others)} ({_ms(min(o.gap_s for o in others))}"
        f"-{_ms(max(o.gap_s for o in others))})"
        if others
        else ""
    )
    median, p99 = g.median_gap, g.p99_gap
    if g.shape == "every request" and median is not None:
        return (
            f"the router adds {_ms(g.gap_s)} to every request's TTFT: {sides}; the median request paid "
            f"{_range(median)} of it, so it lifts P50 as much as P99 (TTFT's level, not the tail's spread); "
            f"without it, {g.level_id}'s TTFT P99 would be about {_ms(max(g.client_p99_s - g.gap_s, 0.0))} "
            f"instead of {_ms(g.client_p99_s)}{also}"
        )
    if g.shape == "uneven" and median is not None:
        tail = (
            f", and the client's P99 stands {_range(p99)} above the replicas' own"
            if p99 is not None and np.isfinite(p99[0])
            else ""
        )
        return (
            f"the router adds {_ms(g.gap_s)} to the mean TTFT, unevenly: {sides}; the median request paid "
            f"{_range(median)} of it{tail}: it holds some requests far longer than others and spreads the "
            f"tail{also}"
        )
    buckets = f" (the median request paid {_range(median)})" if median is not None else ""
    return (
        f"the router adds {_ms(g.gap_s)} to the mean TTFT: {sides}; the replicas' buckets are too wide to "
        f"tell whether every request paid it{buckets}{also}"
    )


def router_path_yields(findings: list[Finding]) -> None:
    """A standing level whose time passed outside the server (the network path, or saturation on this
    host) spent it in the router where the router check found its gap in that level: the router's
    finding explains it, and the standing verdict becomes context (`outside_was_the_router`)."""
    levels = {lv for f in findings if f.check_id == ROUTER_ID for lv in f.evidence.get("router_levels", ())}
    if not levels:
        return
    for f in findings:
        if (
            f.kind == "standing"
            and f.check_id in OUTSIDE_FINDINGS
            and f.evidence.get("dominant_part") == "outside the server"
            and set(f.evidence.get("levels", ())) <= levels
        ):
            f.tail_share = 0.0
            f.evidence["outside_was_the_router"] = ROUTER_ID


def _range(r: Range) -> str:
    lo, hi = max(r[0], 0.0), r[1]
    if not np.isfinite(hi):
        return f"at least {_ms(lo)}"
    if hi <= 0:
        return "none"
    if round(lo * 1000) == round(hi * 1000):
        return _ms(lo)
    return f"{lo * 1000:.0f}-{_ms(hi)}" if hi < 10 else f"{_ms(lo)}-{_ms(hi)}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"
