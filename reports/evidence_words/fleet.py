"""Sentences for a fleet's findings (analyzers/triage/fleet/): a hot replica's shares and its latency
at the same load, a routing imbalance's outstanding work, and the router's own time per level."""

from __future__ import annotations

from reports.evidence_words.phrasing import number, seconds


def fleet_sentences(ev: dict, metric: str) -> list[str]:
    """A hot replica: its shares of the tail and of the requests, its latency at the same load; a
    routing imbalance: what the tail's replicas held against the lightest one (analyzers/triage/fleet/)."""
    replica, shares, ratio = (
        ev.get("replica"),
        ev.get("replica_shares") or {},
        number(ev, "latency_vs_others_same_load"),
    )
    out = []
    if replica is not None and replica in shares and ratio is not None:
        mine = shares[replica]
        out.append(
            f"replica {replica} served {mine['tail_share']:.0%} of the tail and {mine['request_share']:.0%} "
            "of the requests"
        )
        its, theirs = number(ev, "latency_median_s"), number(ev, "others_latency_median_s")
        n, m = number(ev, "in_flight_median"), number(ev, "others_in_flight_median")
        medians = (
            f" (median {seconds(its)} with {n:.0f} in flight, theirs {seconds(theirs)} with {m:.0f})"
            if its is not None and theirs is not None and n is not None and m is not None
            else ""
        )
        residence = number(ev, "residence_per_work_vs_others")
        if ev.get("slowness_from") == "residence" and residence is not None:
            # Judged by Little's law (analyzers/triage/fleet/hot_replica.py): its loads and the others' did not meet.
            out.append(
                f"sent no more requests and no heavier ones, each stayed on it {residence:.1f}x as long as "
                f"the others' did on theirs{medians}; at the loads the others had, {ratio:.1f}x"
            )
        else:
            out.append(f"at the same load its {metric.upper()} was {ratio:.1f}x the other replicas'{medians}")
    own, light = number(ev, "tail_own_outstanding_median"), number(ev, "tail_lightest_outstanding_median")
    if own is not None and light is not None:
        held = (
            f"{ev['tail_own_in_flight_median']:.0f} requests and "
            if number(ev, "tail_own_in_flight_median") is not None
            else ""
        )
        light_held = (
            f"{ev['tail_lightest_in_flight_median']:.0f} and "
            if number(ev, "tail_lightest_in_flight_median") is not None
            else ""
        )
        out.append(
            f"the slowest requests went to a replica holding {held}{own:,.0f} outstanding tokens (median) "
            f"while another held {light_held}{light:,.0f}"
            + (f", as {ev['routing']} chose" if ev.get("routing") else "")
        )
    return out


def router_sentences(ev: dict, metric: str) -> list[str]:
    """Each level where the router's gap was found: the client's TTFT mean against the replicas' own."""
    levels = ev.get("levels")
    if not isinstance(levels, dict):  # a standing finding's levels are a list of ids
        return []
    out = []
    for level in ev.get("router_levels") or []:
        g = levels.get(level) or {}
        client, own, gap, rtt = (number(g, k) for k in ("client_ttft_mean_s", "replicas_ttft_mean_s", "gap_s", "rtt_s"))
        if client is not None and own is not None and gap is not None:
            trip = f", less the {seconds(rtt)} round trip to the router" if rtt is not None else ""
            out.append(
                f"in {level} the client's TTFT mean was {seconds(client)} and the replicas' own "
                f"{seconds(own)}{trip}: {seconds(gap)} in the router"
            )
    return out[:2]
