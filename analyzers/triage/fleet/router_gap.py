"""The router's own time, level by level: TTFT as the client saw it through the router against TTFT
at the replicas behind it.

The replicas' side is their own `vllm:time_to_first_token_seconds` histogram, read page by page by
the server probe and summed over the pages (`--replica-metrics`, probes/fleet_pages.py), over the
span in which the replicas saw the level's requests (phases.observed_window). The means subtract
exactly: sum/count on both sides, where both count about the same requests (phases.same_requests).
Quantiles do not: the replicas' are known only to the buckets they fell in, so the gap at the
median and at P99 is an interval, [the client's quantile - the bucket's upper edge, the client's -
its lower edge] (server_quantiles.quantile_range). The gap at the median says whether every request
paid the router's time (a constant added to each, which lifts P50 as much as P99) or some paid far
more than others (its own queue, retries, new connections: then it spreads the tail too).

What the gap is not: one round trip between the client and the router (the tcp probe's RTT on the
target's own connections, taken off where it was recorded), nor a path that lost packets (the
level is left to p99.net.retransmits). It does hold the replica's own front end before its TTFT
clock starts (HTTP parsing, tokenization: a few ms for short prompts), which the thresholds of
router.py sit above; a sweep of one replica directly measures it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.probe_series import ProbeSeries
from analyzers.server_quantiles import quantile_range, weighted_mean
from analyzers.triage.network import MIN_RETRANS
from analyzers.triage.phases import observed_window, same_requests, window_rows
from analyzers.triage.tail_windows import Window
from rundir.table import RequestTable

MIN_REQUESTS = 10  # a level with fewer measured requests gives no mean worth subtracting
EVERY_REQUEST = 0.75  # the median request paid at least this share of the mean gap: every request paid it
UNEVEN = 0.5  # the median request paid at most this share of it: some paid far more than others

Range = tuple[float, float]


@dataclass(frozen=True)
class LevelGap:
    level_id: str
    window: Window  # the level's measured requests: first send .. last finish
    n: int  # the client's measured requests
    client_mean_s: float
    client_p50_s: float
    client_p99_s: float
    replicas_mean_s: float  # sum/count of the replicas' TTFT histogram over the span
    replicas_count: float  # first tokens the replicas counted over the span
    replicas_p50: Range | None  # where the replicas' pooled P50 lies, from its buckets
    replicas_p99: Range | None
    rtt_s: float | None = None  # mean RTT of the target's own connections (None: not recorded)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"level {self.level_id}: a gap needs measured requests, got {self.n}")
        for name in ("client_mean_s", "client_p50_s", "client_p99_s", "replicas_mean_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"level {self.level_id}: {name} must be a latency >= 0, got {getattr(self, name)}")
        for name in ("replicas_p50", "replicas_p99"):
            r = getattr(self, name)
            if r is not None and not 0 <= r[0] <= r[1]:
                raise ValueError(f"level {self.level_id}: {name} must be a range lo <= hi, got {r}")

    @property
    def gap_s(self) -> float:
        """The client's mean TTFT over the replicas' own, less one round trip to the router."""
        return self.client_mean_s - self.replicas_mean_s - (self.rtt_s or 0.0)

    @property
    def median_gap(self) -> Range | None:
        """Where the gap at the median lies: the client's P50 less the replicas' P50 bucket's edges."""
        return _less(self.client_p50_s, self.replicas_p50, self.rtt_s)

    @property
    def p99_gap(self) -> Range | None:
        return _less(self.client_p99_s, self.replicas_p99, self.rtt_s)

    @property
    def shape(self) -> str:
        """ "every request" paid the gap (the median request paid most of it), "uneven" (the median
        request paid little of it), or "unresolved" (the replicas' buckets are too wide to tell)."""
        m = self.median_gap
        if m is None or self.gap_s <= 0:
            return "unresolved"
        if m[0] >= EVERY_REQUEST * self.gap_s:
            return "every request"
        if m[1] <= UNEVEN * self.gap_s:
            return "uneven"
        return "unresolved"

    @property
    def added_to_tail_s(self) -> float:
        """What the router added to a tail request: the mean gap; where it is uneven, at least what
        the client's P99 stands above the replicas' own, where the buckets bound it."""
        p99 = self.p99_gap
        if self.shape == "uneven" and p99 is not None and np.isfinite(p99[0]):
            return max(self.gap_s, p99[0], 0.0)
        return max(self.gap_s, 0.0)

    def evidence(self) -> dict:
        out = {
            "requests": self.n,
            "client_ttft_mean_s": round(self.client_mean_s, 6),
            "replicas_ttft_mean_s": round(self.replicas_mean_s, 6),
            "replicas_ttft_count": self.replicas_count,
            "gap_s": round(self.gap_s, 6),
            "client_ttft_p50_s": round(self.client_p50_s, 6),
            "client_ttft_p99_s": round(self.client_p99_s, 6),
            "shape": self.shape,
        }
        for name, r in (
            ("replicas_ttft_p50_range_s", self.replicas_p50),
            ("replicas_ttft_p99_range_s", self.replicas_p99),
            ("median_gap_range_s", self.median_gap),
            ("p99_gap_range_s", self.p99_gap),
        ):
            if r is not None:
                out[name] = [_round(r[0]), _round(r[1])]
        if self.rtt_s is not None:
            out["rtt_s"] = round(self.rtt_s, 6)
        return out


def _less(client_s: float, replicas: Range | None, rtt_s: float | None) -> Range | None:
    if replicas is None:
        return None
    rtt = rtt_s or 0.0
    return client_s - replicas[1] - rtt, client_s - replicas[0] - rtt


def _round(v: float) -> float | None:
    """JSON has no infinity: an unbounded edge is null."""
    return round(v, 6) if np.isfinite(v) else None


def level_gaps(table: RequestTable, server: ProbeSeries, tcp: ProbeSeries | None) -> tuple[list[LevelGap], list[str]]:
    """Each level's gap, and for each level that could not be judged, why (one clause each)."""
    df = table.df
    ttft = df["ttft_s"].to_numpy(float)
    ok = (df["status"] == "ok").to_numpy() & df["in_window"].to_numpy() & np.isfinite(ttft)
    t_sent, t_done = df["t_sent"].to_numpy(float), df["t_done"].to_numpy(float)
    gaps: list[LevelGap] = []
    skipped: list[str] = []
    for level_id, rows in table.level_rows().items():
        rows = rows[ok[rows]]
        if rows.size < MIN_REQUESTS:
            skipped.append(f"{level_id}: {rows.size} measured requests (fewer than {MIN_REQUESTS})")
            continue
        w = Window(float(np.nanmin(t_sent[rows])), float(np.nanmax(t_done[rows])))
        seen = window_rows(server, observed_window(table, rows, w))
        mean = weighted_mean(server.numeric, "ttft", seen) if seen is not None else None
        counts = server.numeric.get("ttft_count")
        count = float(np.nansum(counts[seen])) if seen is not None and counts is not None else 0.0
        if mean is None or seen is None:
            skipped.append(
                f"{level_id}: the replicas' pages had no TTFT histogram over its span "
                "(vllm:time_to_first_token_seconds)"
            )
            continue
        if not same_requests(count, int(rows.size)):
            skipped.append(
                f"{level_id}: the replicas counted {count:.0f} first tokens over its span and the client "
                f"{rows.size}: not the same requests"
            )
            continue
        retrans, rtt = _path(tcp, w)
        if retrans >= MIN_RETRANS:
            skipped.append(
                f"{level_id}: the target's own connections retransmitted {retrans:.0f} segments "
                "(p99.net.retransmits judges the path)"
            )
            continue
        v = ttft[rows]
        gaps.append(
            LevelGap(
                level_id,
                w,
                int(rows.size),
                float(v.mean()),
                float(np.percentile(v, 50)),
                float(np.percentile(v, 99)),
                mean,
                count,
                quantile_range(server.numeric, "ttft_p50", seen),
                quantile_range(server.numeric, "ttft_p99", seen),
                rtt,
            )
        )
    return gaps, skipped


def _path(tcp: ProbeSeries | None, w: Window) -> tuple[float, float | None]:
    """(retransmits on the target's own connections, their mean RTT in seconds or None) over a level."""
    keep = window_rows(tcp, w)
    if tcp is None or keep is None:
        return 0.0, None
    retrans = tcp.numeric.get("conns_retrans")
    rtt = tcp.numeric.get("conns_rtt_ms_mean")
    n = float(np.nansum(retrans[keep])) if retrans is not None else 0.0
    r = rtt[keep] if rtt is not None else np.empty(0)
    r = r[np.isfinite(r)]
    return n, float(r.mean()) / 1000 if r.size else None
