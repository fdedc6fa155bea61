"""Standing tails explained: split a slow level's latency into queue, prefill and decode, name the
part that dominates and the cause behind it, with the numbers.

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

import numpy as np

from analyzers.triage.contracts import CheckResult, Finding, failed, passed
from analyzers.triage.levels import LevelLoad
from analyzers.triage.phases import LevelPhases

KV_FULL = 0.95
PINNED = 0.75  # running mean >= this x max_num_seqs: the batch is pinned at its cap
# (scrapes between two steps catch one fewer now and then)
MIN_WAITING = 0.5  # requests waiting on average (KV, token budget)
SMALL_CAP = 4  # caps this small are judged by the batch reaching them, not by the mean
MIN_QUEUED_SHARE = 0.3  # requests waited in at least this share of the level's scrapes (admission)
NEIGHBOUR_CORES = 0.5
COMPUTE_BOUND = 0.75  # the server busy on this share of the cores
LONG_PROMPT_TOKENS = 1024
CLIENT_BUSY_CORES = 0.8  # the load generator this busy: time outside the engine may be the client's
BATCH_GROWTH = 1.5
STALL_SHARE = 0.02

STANDING_ID, STANDING_TITLE = "p99.standing", "standing tails are explained"
NOT_SPLIT = "ttft (not split: no server histograms)"
NEXT = {
    "p99.sched.kv-capacity": "give the KV cache more room (fp8 KV, more memory, TP) or admit fewer requests "
    "(--max-num-seqs at `llmdiag oom`'s safe concurrency); see `llmdiag oom --run`",
    "p99.sched.admission": "raise --max-num-seqs if KV and TPOT allow (see `llmdiag oom`), or lower the offered "
    "load; the TTFT tail is time in the queue",
    "p99.sched.token-budget": "raise --max-num-batched-tokens (or enable chunked prefill) so waiting prompts "
    "are admitted in fewer steps",
    "p99.sched.prefill-time": "enable chunked prefill with a --max-num-batched-tokens budget, cap long prompts, or "
    "route them to their own replicas",
    "p99.sched.batch-size": "cap --max-num-seqs at the largest batch whose TPOT meets the SLO (read it off the sweep)",
    "p99.sched.decode-stalls": "look at what pauses the engine loop (probe stacks): prefills of new requests "
    "between decode steps, the event loop, GC",
    "p99.host.cpu": "move the other processes off the server's cores, or pin the server (taskset/cpuset)",
    "p99.sched.saturation": "the load is above this deployment's capacity: lower it to the last level that meets "
    "the SLO, or add replicas; a faster engine build (GPU) raises the ceiling",
    "p99.client-path": "the time is spent before the server sees the request: client, HTTP, tokenization",
    "p99.net.path": "time outside the server on a remote target is the network path: check the target's "
    "connections (probe tcp), then `llmdiag pcap`",
}
CATEGORY = {"p99.host.cpu": "host", "p99.net.path": "network", "p99.client-path": "client"}


def engine_limits(engine_args: list[str], embedded: bool, replicas: int = 1) -> dict[str, int | None]:
    """max_num_seqs and max_num_batched_tokens from `--engine-arg` flags (refengine's defaults when
    embedded; unknown for an external target, whose limits are inferred from the batch instead).
    For a fleet the server probe sums running over the replicas, so the cap it is held against is
    the fleet's, max_num_seqs x replicas (`replicas` says how many); the token budget is per step
    of one engine and stays as it is."""
    out: dict[str, int | None] = {
        "max_num_seqs": 128 if embedded else None,
        "max_num_batched_tokens": 2048 if embedded else None,
    }
    args = [a for arg in engine_args for a in arg.split("=", 1)]
    for i, a in enumerate(args[:-1]):
        key = a.lstrip("-").replace("-", "_")
        if key in out:
            try:
                out[key] = int(args[i + 1])
            except ValueError:
                pass
    seqs = out["max_num_seqs"]
    if seqs is not None:
        out["max_num_seqs"] = seqs * replicas
    out["replicas"] = replicas
    return out


def _cap_words(limits: dict) -> str:
    cap, replicas = limits["max_num_seqs"], limits.get("replicas") or 1
    return (
        f"max_num_seqs={cap}"
        if replicas == 1
        else f"max_num_seqs={cap // replicas} on each of {replicas} replicas ({cap} in all)"
    )


def _share(parts: dict[str, float]) -> tuple[str, float, float]:
    total = sum(parts.values()) or 1e-12
    name = max(parts, key=lambda k: parts[k])
    return name, parts[name], parts[name] / total


def _ms(s: float | None) -> str:
    return "?" if s is None else (f"{1e3 * s:.0f} ms" if s < 10 else f"{s:.1f} s")


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


def name_cause(
    metric: str, lv: LevelLoad, ph: LevelPhases, base: LevelPhases | None, limits: dict, local_target: bool
) -> tuple[str, str, str]:
    """(check id, the dominant part, a sentence with the numbers) for one standing level."""
    parts = phase_parts(metric, ph)
    part, _, share = _share(parts)
    cause, text = _cause(metric, lv, ph, base, limits, local_target, parts, part)
    if part == NOT_SPLIT:
        return (
            cause,
            part,
            f"{text} — {lv.level_id}: {lv.why} (no queue/prefill split: the server's histograms saw none)",
        )
    split = ", ".join(f"{k} {_ms(v)}" for k, v in parts.items())
    return cause, part, f"{text} — {lv.level_id}: {lv.why}; {part} is {share:.0%} of it ({split})"


def phase_parts(metric: str, ph: LevelPhases) -> dict[str, float]:
    if metric == "ttft":
        return ph.ttft_parts()
    if metric == "e2e":
        return ph.e2e_parts()
    return {"decode": ph.decode_mean_s}


Verdict = tuple[str, str]  # (check id, the sentence with the numbers)


def _kv_capacity(s: dict, queue_part: bool, cap: int | None) -> Verdict | None:
    """The KV cache at its ceiling and something to show for it: preemptions, retracted requests, or
    requests waiting while the queue dominates. "At its ceiling" is >= KV_FULL, or full *for the next
    request*: while requests waited, the free part was smaller than one running request's share
    (usage / running; unique prompts share nothing), however far from 100% it reads — 10 of 16
    blocks used by one request that the next one needs 10 of (the same rule as `llmdiag oom --ramp`,
    docs/diagnosis.md). A batch pinned at a known max_num_seqs is the admission limit's instead."""
    waiting = s.get("waiting_mean") or 0.0
    kv_max, pre, retr = s.get("kv_usage_max"), s.get("preemptions") or 0.0, s.get("retracted_max") or 0.0
    if kv_max is None:
        return None
    kv_w, per_request = s.get("kv_usage_when_waiting"), s.get("kv_per_running_when_waiting")
    below_cap = cap is None or (s.get("running_max_when_waiting") or 0.0) < cap
    next_one_waits = kv_w is not None and per_request is not None and below_cap and 1.0 - kv_w < per_request
    if kv_max < KV_FULL and not next_one_waits:
        return None
    if not (pre > 0 or retr > 0 or (queue_part and waiting >= MIN_WAITING)):
        return None
    what = f"{pre:.0f} preemptions" if pre else f"{retr:.0f} retracted" if retr else f"{waiting:.1f} waiting"
    if kv_max >= KV_FULL or kv_w is None:  # (below KV_FULL the next request waits: kv_w is known)
        return "p99.sched.kv-capacity", f"KV cache {kv_max:.0%} full with {what}"
    return "p99.sched.kv-capacity", (
        f"KV cache full for the next request: {kv_w:.0%} used while requests waited, "
        f"the free {1 - kv_w:.0%} less than one running request's {per_request:.0%}, "
        f"with {what}"
    )


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


def _queue(lv: LevelLoad, ph: LevelPhases, base: LevelPhases | None, limits: dict) -> Verdict | None:
    """Time in the queue: the admission limit (batch pinned at its cap) or the token budget."""
    s = ph.server
    waiting = s.get("waiting_mean") or 0.0
    cap = limits.get("max_num_seqs")
    held, held_max = s.get("running_when_waiting"), s.get("running_max_when_waiting")
    queued = s.get("waiting_share") or 0.0
    ceiling = cap if cap is not None else s.get("running_max")
    # Pinned: while requests waited the batch reached its cap, and held most of it on average
    # (a scrape between two steps sees one fewer: with a cap of 1 or 2 that is a big share).
    pinned = (
        held is not None
        and held_max is not None
        and ceiling
        and queued >= MIN_QUEUED_SHARE
        and held_max >= ceiling
        and held >= (0.5 if ceiling <= SMALL_CAP else PINNED) * ceiling
        and lv.load
        and ceiling < lv.load
    )
    if pinned:
        limit = _cap_words(limits) if cap is not None else f"{s['running_max']:.0f} (its ceiling)"
        return "p99.sched.admission", (
            f"admission limit, running pinned at {limit} (mean {held:.1f} while "
            f"requests waited, {queued:.0%} of the level) with {waiting:.1f} waiting"
        )
    mbt = limits.get("max_num_batched_tokens")
    if waiting >= MIN_WAITING and mbt and ph.in_tokens_mean >= 0.5 * mbt:
        return "p99.sched.token-budget", (
            f"{waiting:.1f} waiting with prompts of {ph.in_tokens_mean:.0f} tokens against a {mbt}-token budget"
        )
    return None


def _prefill(lv: LevelLoad, ph: LevelPhases, base: LevelPhases | None, limits: dict) -> Verdict | None:
    """Time in prefill: long prompts, absolutely or against the baseline's."""
    long_prompts = ph.in_tokens_mean >= LONG_PROMPT_TOKENS or (
        base is not None and base.in_tokens_mean > 0 and ph.in_tokens_mean >= 4 * base.in_tokens_mean
    )
    if long_prompts:
        return "p99.sched.prefill-time", f"long prefills, prompts of {ph.in_tokens_mean:.0f} tokens"
    return None


def _decode(lv: LevelLoad, ph: LevelPhases, base: LevelPhases | None, limits: dict) -> Verdict | None:
    """Time in decode: batches grown past the baseline's, or stalls in the token stream."""
    running = ph.server.get("running_mean")
    base_running = base.server.get("running_mean") if base is not None else None
    if base is not None and running and base_running and running >= BATCH_GROWTH * base_running:
        return "p99.sched.batch-size", (
            f"decode batches of {running:.1f} vs {base_running:.1f} "
            f"at the baseline, TPOT {_ms(ph.tpot_mean_s)} vs {_ms(base.tpot_mean_s)}"
        )
    if ph.stall_share is not None and ph.stall_share >= STALL_SHARE:
        return "p99.sched.decode-stalls", (
            f"{ph.stall_share:.1%} of token gaps are stalls (>= 10x the median {_ms(ph.itl_median_s)})"
        )
    return None


# The causes a dominant part can have, tested after KV capacity and the path.
_BY_PART = {"queue": _queue, NOT_SPLIT: _queue, "prefill": _prefill, "decode": _decode}


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
    verdict = _kv_capacity(ph.server, queue_part=part in ("queue", NOT_SPLIT), cap=limits.get("max_num_seqs"))
    if verdict:
        return verdict
    outside = ""
    if part == "outside the server":
        verdict, outside = _outside(parts[part], ph.host, local_target)
    elif part in _BY_PART:
        verdict = _BY_PART[part](lv, ph, base, limits)
    if verdict:
        return verdict
    nb = _neighbour(ph.host, base.host if base is not None and base is not ph else None)
    if nb:
        return "p99.host.cpu", nb + (f"; {outside}" if outside else "")
    return _saturation(ph.server, ph.host, outside)


def check_standing(
    metric: str,
    levels: list[LevelLoad],
    phases: dict[str, LevelPhases],
    limits: dict,
    local_target: bool,
    severity_slo: str = "high",
) -> list[CheckResult]:
    standing = [lv for lv in levels if lv.standing]
    if not standing:
        return [
            passed(
                STANDING_ID,
                "scheduling",
                STANDING_TITLE,
                f"no level's {metric.upper()} misses the SLO or sits {3:g}x above the unloaded baseline",
            )
        ]
    base_id = standing[0].baseline_level
    base = phases.get(base_id) if base_id else None
    by_cause: dict[str, list[tuple[LevelLoad, str, str]]] = {}
    for lv in standing:
        cause, part, sentence = name_cause(metric, lv, phases[lv.level_id], base, limits, local_target)
        by_cause.setdefault(cause, []).append((lv, part, sentence))
    out = [
        passed(
            STANDING_ID,
            "scheduling",
            STANDING_TITLE,
            f"{len(standing)} standing level(s): " + ", ".join(lv.level_id for lv in standing),
            standing=[lv.level_id for lv in standing],
        )
    ]
    for cause, items in by_cause.items():
        worst = max(items, key=lambda it: it[0].slo_stat)
        lv, part, sentence = worst
        ph = phases[lv.level_id]
        evidence = {
            "levels": [it[0].level_id for it in items],
            "dominant_part": part,
            "parts_s": phase_parts(metric, ph),
            "ttft_mean_s": ph.ttft_mean_s,
            "decode_mean_s": ph.decode_mean_s,
            "tpot_mean_s": ph.tpot_mean_s,
            "in_tokens_mean": ph.in_tokens_mean,
            "out_tokens_mean": ph.out_tokens_mean,
            "server": {k: v for k, v in ph.server.items() if v is not None},
            "host": {k: v for k, v in ph.host.items() if v is not None},
            "limits": {k: v for k, v in limits.items() if v is not None},
            "tail_requests": int(sum(it[0].tail_rows.size for it in items)),
        }
        more = f" (also {', '.join(it[0].level_id for it in items if it is not worst)})" if len(items) > 1 else ""
        finding = Finding(
            cause,
            CATEGORY.get(cause, "scheduling"),
            severity_slo if any(it[0].misses_slo for it in items) else "medium",
            sentence + more,
            evidence,
            [it[0].window for it in items],
            len(items),
            NEXT[cause],
            kind="standing",
        )
        out.append(failed(finding, STANDING_TITLE, finding.title))
    return out


def tail_rows(levels: list[LevelLoad]) -> np.ndarray:
    parts = [lv.tail_rows for lv in levels if lv.standing]
    return np.concatenate(parts) if parts else np.empty(0, dtype=int)
