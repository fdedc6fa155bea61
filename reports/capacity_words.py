"""A capacity search's answer in words: what `llmbench capacity` prints and the report leads with.

analyzers.capacity.answer computes the answer (numbers, verdicts); this says it."""

from __future__ import annotations

from analyzers.capacity.replicas import per_replica
from analyzers.stats.exceedance import min_n_for_in
from analyzers.stats.slo import failure_summary
from reports.replicas_words import per_replica_words
from rundir.capacity import CapacityAnswer


def capacity_headline(a: CapacityAnswer) -> str:
    """The sentence that answers a capacity search (the report leads with it, the terminal prints it)."""
    what = "max concurrency" if a.axis == "concurrency" else "max request rate"
    unit = "" if a.axis == "concurrency" else " req/s"
    if a.capacity is None:
        return f"{what} within SLO: none (the lowest load tried missed it; bounded by {a.bounded_by})" + _failures(a)
    out = f"{what} within SLO: {a.capacity:g}{unit}"
    if a.trace_rate:
        out += f", the trace at {a.capacity / a.trace_rate:.3g}x its own speed"
    if a.low is None:
        out += f" ({_not_established(a)})"
    elif a.high is not None and (a.low, a.high) != (a.capacity,) * 2:
        out += f", between {a.low:g} and {a.high:g} at {a.confidence:.0%}"
    elif a.low == a.high == a.capacity:
        out += f" (clear at {a.confidence:.0%})"
    if a.goodput_req_s is not None:
        out += f"; goodput there {a.goodput_req_s:.2f} req/s ({a.output_tok_s:.1f} output tok/s)"
    if a.bounded_by not in ("slo", "none"):
        out += f"; bounded by {a.bounded_by}, not by the SLO"
    each = per_replica_words(per_replica(a))
    return out + _failures(a) + (f"; {each}" if each else "")


def _failures(a: CapacityAnswer) -> str:
    """How many failed at the answer's load and at the lowest `out` one (counted over the bounds)."""
    parts = []
    for load in dict.fromkeys(x for x in (a.capacity, a.lowest_out) if x is not None):
        v = next((x for x in a.loads if x.load == load), None)
        if v is not None and v.failed:
            words = failure_summary(v.n, v.failed_no_token, v.failed - v.failed_no_token)
            parts.append(f"at {load:g}{'' if a.axis == 'concurrency' else ' req/s'}: {words}")
    return f"; {'; '.join(parts)}, counted as over the bound" if parts else ""


def _not_established(a: CapacityAnswer) -> str:
    """Why no load is established within the SLO, and what would establish one."""
    few = [v for v in a.loads if v.too_few]
    if not few:
        return f"a point estimate: no load was clearly within the SLO at {a.confidence:.0%}"
    counts = sorted({v.n for v in few})
    span = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return (
        f"a point estimate, not established at {a.confidence:.0%}: a P99 within its bound needs "
        f"{min_n_for_in(0.99)} requests with none over it, the loads had {span}; lengthen --duration "
        "or raise --repeats"
    )
