"""`p99.fleet.router` (analyzers/triage/fleet/router.py) on synthetic runs: the client's TTFT through a
router against the replicas' own TTFT histogram, as the server probe records it from the pages behind
the router (`--replica-metrics`). A router that adds a constant is named with the number and as the
level of TTFT, an uneven one as spreading the tail; a small gap, the path's own round trip, the
target's own page and a run without the histogram are not the router's."""

from __future__ import annotations

import numpy as np
from planted import T0, write_run

from analyzers.server_quantiles import quantile_range
from analyzers.triage.fleet.router import MIN_GAP_S, ROUTER_ID
from analyzers.triage.levels import MIN_EXCESS_S
from analyzers.triage.p99 import diagnose_p99
from probes.prom import Histogram, quantile_estimate
from refengine.server.metrics import TTFT_BUCKETS
from reports.evidence_words.sentences import evidence_sentences
from rundir import RequestRecord

ROUTER_URL, REPLICA_PAGE = "http://10.99.0.5:8000", "http://10.99.0.6:8000/metrics"
BEHIND = {"replica_metrics": [REPLICA_PAGE]}
TPOT_S, OUT = 0.010, 32


def router_run(
    tmp_path,
    delay,
    n: int = 400,
    users: int = 4,
    target: dict | None = None,
    histogram: bool = True,
    tcp_rtt_ms: float | None = None,
    metric_page: bool = True,
    slow_at_replica=lambda i: 0.0,
    slos: dict | None = None,
):
    """A closed loop of `users` through a router: each replica TTFT ~ 25 ms (plus `slow_at_replica(i)`), the
    router holding request i `delay(i)` seconds before forwarding it; the server probe's rows (one a second)
    are the replicas' own TTFT histogram over each second, as probes/server.py writes them."""
    rng = np.random.default_rng(3)
    clocks = [T0 + 0.01 * u for u in range(users)]
    recs, observed = [], []  # observed: (replica's first token time, its own TTFT)
    for i in range(n):
        u = i % users
        t = clocks[u]
        own = 0.025 * float(rng.lognormal(0.0, 0.2)) + slow_at_replica(i)
        ttft = own + delay(i)
        e2e = ttft + TPOT_S * (OUT - 1)
        recs.append(
            RequestRecord(
                level_id="c4",
                concurrency=users,
                request_rate=None,
                target_input_len=64,
                target_output_len=OUT,
                t_scheduled=t,
                t_sent=t,
                t_first_token=t + ttft,
                t_done=t + e2e,
                status="ok",
                in_window=True,
                prompt_tokens=64,
                completion_tokens=OUT,
                itl_s=[TPOT_S] * (OUT - 1),
            ).derive()
        )
        observed.append((t + ttft, own))
        clocks[u] = t + e2e + 0.001
    rows = [_server_row(float(s), observed, histogram) for s in np.arange(T0 + 1.0, max(clocks) + 1.0, 1.0)]
    probes = {"server": rows} if metric_page else {}
    if tcp_rtt_ms is not None:
        probes["tcp"] = [
            {
                "t": r["t"],
                "dt_s": 1.0,
                "Tcp.RetransSegs": 0,
                "conns": users,
                "conns_retrans": 0,
                "conns_rtt_ms_mean": tcp_rtt_ms,
            }
            for r in rows
        ]
    return write_run(
        tmp_path / "run", recs, probes, url=ROUTER_URL, target=BEHIND if target is None else target, slos=slos
    )


def _server_row(t: float, observed: list[tuple[float, float]], histogram: bool) -> dict:
    row: dict = {"t": t, "up": 1, "running": 4, "waiting": 0, "kv_usage": 0.2, "preemptions": 0}
    own = [v for at, v in observed if t - 1.0 < at <= t]
    if not histogram or not own:
        return row
    h = Histogram(
        {le: float(sum(v <= le for v in own)) for le in (*TTFT_BUCKETS, float("inf"))}, len(own), float(sum(own))
    )
    row.update(ttft_count=len(own), ttft_mean_s=sum(own) / len(own))
    # The replica's own TTFT is its queue (a fifth) and its prefill: the standing split's histograms.
    row.update(
        queue_time_count=len(own),
        queue_time_mean_s=0.2 * sum(own) / len(own),
        prefill_time_count=len(own),
        prefill_time_mean_s=0.8 * sum(own) / len(own),
    )
    for q in (0.5, 0.9, 0.99):
        est = quantile_estimate(h, q)
        key = f"ttft_p{int(q * 100)}"
        if est is None:
            continue
        if est.value is None:  # the first bucket gives "< its edge", the +Inf one "> the last edge"
            row.update({f"{key}_s": None, **({f"{key}_gt_s": est.lo} if np.isinf(est.hi) else {f"{key}_lt_s": est.hi})})
        else:
            row.update({f"{key}_s": est.value, f"{key}_bucket_s": [est.lo, est.hi]})
    return row


def _router(diag):
    return next(c for c in diag.checks if c.check_id == ROUTER_ID)


def test_a_router_that_adds_80_ms_to_every_request_is_named_first_as_the_level_of_ttft(tmp_path):
    diag = diagnose_p99(router_run(tmp_path, lambda i: 0.080))
    first = diag.findings[0]
    assert first.check_id == ROUTER_ID and first.kind == "added", diag.headline
    level = first.evidence["levels"]["c4"]
    assert 0.075 <= level["gap_s"] <= 0.085 and level["shape"] == "every request"
    assert first.title.startswith("the router adds 80 ms to every request's TTFT: replicas' own TTFT mean 2"), (
        first.title
    )
    assert "lifts P50 as much as P99" in first.title
    # Most of what the slowest requests waited is the router's: 80 ms of about 110.
    assert first.coverage >= 0.6 and first.severity == "high"
    said = evidence_sentences(diag.to_dict()["findings"][0])
    assert said[0].startswith("It is ") and "of what the slowest TTFT requests waited" in said[0], said
    assert said[1].startswith("In c4 the client's TTFT mean was 10") and "80 ms in the router" in said[1], said


def test_a_level_that_misses_the_slo_in_the_router_is_the_routers_not_the_network_paths(tmp_path):
    """TTFT P99 over a 100 ms SLO, most of it outside the replicas: the standing split calls that the path
    to a remote target, but the router check measured it in the router, and the path's verdict yields."""
    diag = diagnose_p99(router_run(tmp_path, lambda i: 0.080, slos={"ttft_p99_s": 0.1, "tpot_p95_s": 0.05}))
    assert diag.findings[0].check_id == ROUTER_ID, diag.headline
    path = next(f for f in diag.context if f.check_id == "p99.net.path")
    assert path.evidence["outside_was_the_router"] == ROUTER_ID and path.coverage == 0.0


def test_a_router_that_holds_a_few_requests_long_spreads_the_tail(tmp_path):
    diag = diagnose_p99(router_run(tmp_path, lambda i: 0.5 if i % 10 == 0 else 0.0))
    first = diag.findings[0]
    assert first.check_id == ROUTER_ID, diag.headline
    level = first.evidence["levels"]["c4"]
    assert level["shape"] == "uneven" and level["p99_gap_range_s"][0] >= 0.3
    assert "unevenly" in first.title and "spreads the tail" in first.title, first.title


def test_a_router_gap_beside_a_tail_of_seconds_at_the_replicas_is_context_not_a_cause(tmp_path):
    """60 ms is a material part of the level's mean (about 190 ms) but a few percent of what its slowest
    requests waited (a second each, at the replicas): the router sets the level, not this tail."""
    diag = diagnose_p99(router_run(tmp_path, lambda i: 0.060, slow_at_replica=lambda i: 1.0 if i % 10 == 5 else 0.0))
    assert ROUTER_ID in [f.check_id for f in diag.context] and ROUTER_ID not in [f.check_id for f in diag.findings]
    router = next(f for f in diag.context if f.check_id == ROUTER_ID)
    assert 0.055 <= router.evidence["levels"]["c4"]["gap_s"] <= 0.065 and router.coverage < 0.1


def test_a_router_that_adds_a_few_ms_is_not_named(tmp_path):
    c = _router(diagnose_p99(router_run(tmp_path, lambda i: 0.004)))
    assert c.status == "passed" and "under 20 ms" in c.detail, c.detail


def test_the_round_trip_to_a_remote_router_is_the_paths_not_the_routers(tmp_path):
    c = _router(diagnose_p99(router_run(tmp_path, lambda i: 0.080, tcp_rtt_ms=78.0)))
    assert c.status == "passed" and "less the 78 ms round trip to the router" in c.detail, c.detail
    assert 0.075 <= c.numbers["levels"]["c4"]["rtt_s"] <= 0.081


def test_without_a_router_or_its_replicas_histogram_it_is_not_judged(tmp_path):
    cases = {
        "own page": dict(target={"replica_metrics": [ROUTER_URL + "/metrics"]}),
        "no pages": dict(target={}),
        "no histogram": dict(histogram=False),
        "no server probe": dict(metric_page=False),
    }
    why = {
        name: _router(diagnose_p99(router_run(tmp_path / name, lambda i: 0.080, **kw))) for name, kw in cases.items()
    }
    assert all(c.status == "unchecked" for c in why.values()), {k: c.detail for k, c in why.items()}
    assert "the target's own" in why["own page"].detail and "--replica-metrics" in why["no pages"].detail
    assert "no TTFT histogram" in why["no histogram"].detail and "no server probe" in why["no server probe"].detail
    tpot = _router(diagnose_p99(router_run(tmp_path / "tpot", lambda i: 0.080), metric="tpot"))
    assert tpot.status == "unchecked" and "before the first token" in tpot.detail


def test_the_gap_threshold_is_below_a_standing_levels_excess():
    """A paired measurement (the same requests on two clocks) needs less than a standing level's excess
    over its baseline (two levels' medians with the load's noise between them)."""
    assert 0 < MIN_GAP_S < MIN_EXCESS_S["ttft"]


def test_a_pooled_quantile_lies_between_its_intervals_bucket_edges():
    nan = float("nan")
    numeric = {
        "ttft_p50_s": np.array([0.015, nan, nan, 0.05]),
        "ttft_p50_bucket_s.0": np.array([0.01, nan, nan, 0.04]),
        "ttft_p50_bucket_s.1": np.array([0.02, nan, nan, 0.06]),
        "ttft_p50_lt_s": np.array([nan, 0.001, nan, nan]),
        "ttft_p50_gt_s": np.array([nan, nan, 30.0, nan]),
    }
    assert quantile_range(numeric, "ttft_p50", np.array([True, False, False, True])) == (0.01, 0.06)
    assert quantile_range(numeric, "ttft_p50", np.array([0, 1])) == (0.0, 0.02)
    assert quantile_range(numeric, "ttft_p50", np.array([2])) == (30.0, float("inf"))
    assert quantile_range(numeric, "ttft_p99", np.array([0])) is None
