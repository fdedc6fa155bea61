"""A standing level's cause: the part of its latency that dominates (split.py), and the cause behind
it named in one sentence with the numbers.

Causes, in the order they are tested (the first that holds is named):
- KV capacity: the KV cache at its ceiling (>= KV_FULL) with preemptions (vLLM) or retracted
  requests (SGLang), or full while requests wait;
- the path: most of TTFT passes outside the server: the network for a remote target, the client
  when the load generator is busy; on this host otherwise the server's own front end, starved
  like the engine (saturation or a neighbour, below);
- the queue dominates: an admission limit (the running batch pinned at max_num_seqs while
  requests wait), or the token budget (prompts large against max_num_batched_tokens);
- prefill dominates with long prompts: long prefills;
- decode dominates (TPOT, E2E): larger batches than the baseline's, or stalls in the stream;
- a CPU neighbour: other processes take cores from a CPU engine, more than at the baseline;
- saturation: none of those, the engine is busy (compute-bound) and the load is above what it
  serves — a capacity verdict, not a fault.
"""

from __future__ import annotations

from analyzers.triage.levels import LevelLoad
from analyzers.triage.phases import LevelPhases
from analyzers.triage.standing.part_causes import BY_PART, Verdict, kv_capacity
from analyzers.triage.standing.split import NOT_SPLIT, dominant_part, duration, phase_parts

NEIGHBOUR_CORES = 0.5
COMPUTE_BOUND = 0.75  # the server busy on this share of the cores
CLIENT_BUSY_CORES = 0.8  # the load generator this busy: time outside the engine may be the client's


def name_cause(
    metric: str, lv: LevelLoad, ph: LevelPhases, base: LevelPhases | None, limits: dict, local_target: bool
) -> tuple[str, str, str]:
    """(check id, the dominant part, a sentence with the numbers) for one standing level."""
    parts = phase_parts(metric, ph)
    part, _, share = dominant_part(parts)
    cause, text = _cause(metric, lv, ph, base, limits, local_target, parts, part)
    if part == NOT_SPLIT:
        return (
            cause,
            part,
            f"{text} — {lv.level_id}: {lv.why} (no queue/prefill split: the server's histograms saw none)",
        )
    split = ", ".join(f"{k} {duration(v)}" for k, v in parts.items())
    return cause, part, f"{text} — {lv.level_id}: {lv.why}; {part} is {share:.0%} of it ({split})"


def _neighbour(h: dict, base: dict | None) -> str | None:
    """Other processes' CPU, when it can explain the level: enough of it, and (against a baseline)
    that much more than the unloaded level had — a neighbour present at the baseline as much as
    under load does not explain why the load is slower."""
    o, srv = h.get("others_cpu_cores"), h.get("server_cpu_cores")
    if o is None or o < NEIGHBOUR_CORES or (srv is not None and o < 0.3 * srv):
        return None
    o_base = (base or {}).get("others_cpu_cores")
    if o_base is not None and o - o_base < NEIGHBOUR_CORES:
        return None
    psi = h.get("cpu_pressure_some_share")
    more = f" ({o_base:.1f} at the baseline)" if o_base is not None else ""
    who = ", ".join(f"{p['comm']} pid {p['pid']} {p['cpu_cores']:.1f}" for p in h.get("top_others") or [])
    srv = f"; the server got {srv:.1f}" if srv is not None else ""
    return (
        f"other processes took {o:.1f} cores{more}"
        + (f" ({who})" if who else "")
        + srv
        + (f", CPU pressure {psi:.0%} of the time" if psi else "")
    )


def _compute_bound(h: dict) -> str | None:
    srv, cores = h.get("server_cpu_cores"), h.get("cores")
    if srv is None or not cores or srv < COMPUTE_BOUND * cores:
        return None
    return f"the server itself busy on {srv:.1f} of {cores} cores"


def _outside(seconds: float, h: dict, local_target: bool) -> tuple[Verdict | None, str]:
    """Time before the server sees the request: the network (remote target), the client (a busy load
    generator), or, on this host, a clause for the verdict that follows (neighbour or saturation)."""
    if not local_target:
        return (
            "p99.net.path",
            f"{seconds:.2f} s of the TTFT passes outside the server (client, HTTP, the network to a remote target)",
        ), ""
    if (h.get("client_cpu_cores") or 0.0) >= CLIENT_BUSY_CORES:
        return (
            "p99.client-path",
            f"{seconds:.2f} s of the TTFT passes outside the engine with the load "
            f"generator busy on {h['client_cpu_cores']:.1f} cores",
        ), ""
    # On this host, time before the engine sees a request is the server's own HTTP front end
    # and tokenization sharing the CPU with the engine: a symptom of the same saturation.
    return None, f"{seconds:.2f} s of it before the engine saw the request: HTTP front end, tokenization"


def _saturation(s: dict, h: dict, outside: str) -> Verdict:
    waiting, running = s.get("waiting_mean") or 0.0, s.get("running_mean")
    busy = _compute_bound(h)
    facts = ", ".join(
        x
        for x in (
            f"{waiting:.1f} waiting" if waiting else "",
            f"{running:.1f} running" if running else "",
            busy or "",
            outside,
        )
        if x
    )
    return "p99.sched.saturation", (
        "saturation: offered load above what the engine serves" + (f" ({facts})" if facts else "")
    )


def _cause(
    metric: str,
    lv: LevelLoad,
    ph: LevelPhases,
    base: LevelPhases | None,
    limits: dict,
    local_target: bool,
    parts: dict[str, float],
    part: str,
) -> Verdict:
    """The cause of the dominant part: KV first (it shows in every part), then by part — time in
    the queue (admission, token budget), in prefill (long prompts), in decode (batch, stalls),
    outside the server (the path) — then a CPU neighbour, then saturation."""
    verdict = kv_capacity(ph, queue_part=part in ("queue", NOT_SPLIT), limits=limits)
    if verdict:
        return verdict
    outside = ""
    if part == "outside the server":
        verdict, outside = _outside(parts[part], ph.host, local_target)
    elif part in BY_PART:
        verdict = BY_PART[part](lv, ph, base, limits)
    if verdict:
        return verdict
    nb = _neighbour(ph.host, base.host if base is not None and base is not ph else None)
    if nb:
        return "p99.host.cpu", nb + (f"; {outside}" if outside else "")
    return _saturation(ph.server, ph.host, outside)
