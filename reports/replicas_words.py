"""A fleet in replicas, in words: `llmbench capacity`'s answer per replica and the replicas a target
rate needs (analyzers/capacity/replicas.py), and `llmdiag plan --peak-rate`'s counts per balancing
policy (analyzers/plan/fleet_sizing.py). The analyzers return numbers; this says them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from analyzers.capacity.replicas import PerReplica, ReplicasFor

if TYPE_CHECKING:  # the capacity report needs none of the planner's simulator to say its words
    from analyzers.plan.fleet_sizing import FleetSizing, PolicyCount

POLICY_WORDS = {"round-robin": "round robin", "least-outstanding": "least-outstanding", "even-split": "an even split"}


def _n(v: float) -> str:
    return f"{v:.3g}" if v < 100 else f"{v:,.0f}"


def _replicas(n: int) -> str:
    return f"{n} replica{'s' if n != 1 else ''}"


def _gpus(n: int) -> str:
    return f"{n} GPU{'s' if n != 1 else ''}"


def per_replica_words(p: PerReplica) -> str | None:
    """The fleet's capacity per replica, labelled as the fleet's / N at the balance measured (None: one replica)."""
    if p.replicas == 1 or p.capacity is None:
        return None
    even = 1 / p.replicas
    balance = (
        ""
        if p.busiest_share is None
        else f"; the busiest replica served {p.busiest_share:.0%} of the requests there, an even share {even:.0%}"
    )
    if p.axis == "rate":
        value = f"{_n(p.capacity)} req/s"
        if p.low is not None and p.high is not None and (p.low, p.high) != (p.capacity, p.capacity):
            value += f" (between {_n(p.low)} and {_n(p.high)})"
    else:
        value = f"{_n(p.capacity)} users"
        if p.rate_req_s is not None:
            value += f", {_n(p.rate_req_s)} req/s within the SLO"
    return (
        f"per replica: {value}: the fleet's / {p.replicas}, so it assumes the balance measured{balance}; "
        "one replica alone may carry more or less"
    )


def replicas_for_words(r: ReplicasFor) -> str:
    """How many replicas the target rate needs, and what that extrapolation assumes."""
    if r.replicas is None or r.per_replica_req_s is None:
        return (
            f"{_n(r.target_rate)} req/s: no rate within the SLO was established, so no replica count "
            "follows from this run"
        )
    out = f"{_n(r.target_rate)} req/s needs {_replicas(r.replicas)} at {_n(r.per_replica_req_s)} req/s each"
    if r.fewest is not None and r.most is not None and (r.fewest, r.most) != (r.replicas, r.replicas):
        out += f" ({r.fewest}-{r.most} across the interval)"
    if r.measured_replicas == 1:
        return out + (
            ": measured on one replica, so it assumes a router that splits the load evenly at no cost; "
            "a real policy costs replicas (`llmdiag plan --peak-rate` predicts how many)"
        )
    if not r.extrapolated:
        return out + ": the fleet size measured"
    return out + (
        f": extrapolated from the {r.measured_replicas} measured, so it assumes each added replica carries "
        "what the measured ones did (the same balance, a router, network and client that keep up at "
        f"{_n(r.target_rate)} req/s); measure a fleet near that size before relying on it"
    )


def count_words(count: PolicyCount, sizing: FleetSizing) -> str:
    policy = POLICY_WORDS[count.policy]
    if count.replicas is None:
        return f"{policy} needs more than {_replicas(sizing.spec.max_replicas)} (the search's bound, --max-replicas)"
    return f"{policy} needs {_replicas(count.replicas)} ({_gpus(count.replicas * sizing.gpus_per_replica)})"


def policy_cost_words(sizing: FleetSizing) -> str:
    """The chosen policy's count against the other's: what the policy costs, in replicas and GPUs."""
    chosen, *others = sizing.counts
    if not others:
        return count_words(chosen, sizing)
    other = others[0]
    a, b = chosen.replicas, other.replicas
    if a is not None and a == b:
        return (
            f"{POLICY_WORDS[chosen.policy]} and {POLICY_WORDS[other.policy]} both need {_replicas(a)} "
            f"({_gpus(a * sizing.gpus_per_replica)}): at this load the policy costs nothing"
        )
    out = f"{count_words(chosen, sizing)} where {count_words(other, sizing)}"
    if a is not None and b is not None:
        more, fewer = (chosen, other) if a > b else (other, chosen)
        diff = abs(a - b)
        out += (
            f": {POLICY_WORDS[more.policy]} costs {_replicas(diff)} ({_gpus(diff * sizing.gpus_per_replica)}) "
            f"more than {POLICY_WORDS[fewer.policy]}"
        )
    return out


def one_replica_words(sizing: FleetSizing) -> str:
    one = sizing.one_replica
    if one.rate is None:
        return (
            f"one replica alone meets the SLO at no rate tried (down to {_n(min(one.tried))} req/s; "
            f"{_n(one.saturated_req_s)} req/s with every seat taken)"
        )
    miss = f", {_n(one.lowest_miss)} req/s missed" if one.lowest_miss is not None else ""
    return f"one replica alone serves {_n(one.rate)} req/s within the SLO{miss} (Poisson arrivals, no router)"
