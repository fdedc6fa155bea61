"""The standing-tail check: each standing level's cause named (analyzers/triage/standing/cause.py),
levels that share a cause one finding with the worst level's numbers and the next step."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from analyzers.triage.contracts import CheckResult, Finding, failed, passed
from analyzers.triage.levels import STANDING_RATIO, LevelLoad
from analyzers.triage.phases import LevelPhases
from analyzers.triage.standing.cause import name_cause
from analyzers.triage.standing.split import phase_parts
from rundir.kv_cache import KVCacheSize

STANDING_ID, STANDING_TITLE = "p99.standing", "standing tails are explained"
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
    "the SLO, or add replicas; faster hardware or a faster engine raises the ceiling",
    "p99.client-path": "the time is spent before the server sees the request: client, HTTP, tokenization",
    "p99.net.path": "time outside the server on a remote target is the network path: check the target's "
    "connections (probe tcp), then `llmdiag pcap`",
}
CATEGORY = {"p99.host.cpu": "host", "p99.net.path": "network", "p99.client-path": "client"}


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
            "limits": {k: asdict(v) if isinstance(v, KVCacheSize) else v for k, v in limits.items() if v is not None},
            "tail_requests": int(sum(it[0].tail_rows.size for it in items)),
        }
        more = _also([it[0] for it in items if it is not worst])
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


def _also(others: list[LevelLoad]) -> str:
    """The other levels of the same cause, each with why it stands: the worst one's sentence says
    "misses the SLO", and a level within the SLO but well above the unloaded one must not read as a miss."""
    if not others:
        return ""
    over = [lv.level_id for lv in others if lv.misses_slo]
    within = [lv.level_id for lv in others if not lv.misses_slo]
    parts = [f"{', '.join(over)}, over the SLO too"] if over else []
    if within:
        parts.append(
            f"{', '.join(within)}, within the SLO but with a median {STANDING_RATIO:g}x or more the unloaded level's"
        )
    return f" (also {'; '.join(parts)})"


def tail_rows(levels: list[LevelLoad]) -> np.ndarray:
    parts = [lv.tail_rows for lv in levels if lv.standing]
    return np.concatenate(parts) if parts else np.empty(0, dtype=int)
