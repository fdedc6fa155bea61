"""A run's findings, grouped by kind across levels: each said once, with the levels it covers.

A sweep of eight levels used to repeat the same two token-count notes eight times. Here every
finding has a kind; levels that share a kind share one finding, which names them (with each
level's own number where it has one). Severities, most important first:

- `invalid`: the measurement itself cannot be trusted as it stands (the client fell behind,
  records went missing, the target stopped, the run was interrupted);
- `caveat`: the numbers hold, with a condition (errors, adaptations the preflight made to the
  requests, a window estimated because the level was cut short);
- `slo`: a level missed a bound, grouped by the bound;
- `info`: the knee;
- `warning`: unreliable P99s, outputs that did not get the requested length, a usage count that
  disagrees with the stream in the suspicious direction;
- `benign`: differences that are expected and explained once in plain words (multi-token
  chunks, the client tokenizer's count).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from analyzers.stats.distribution import MIN_SAMPLES_FOR_P99
from analyzers.stats.latency import LevelStats
from analyzers.stats.token_accounting import TOKENIZER_DIFF_NOTE
from analyzers.validity import INVALID_PREFIX

RunSummary = Any  # analyzers.summary.RunSummary, which imports this module (no import back)

SEVERITIES = ("invalid", "caveat", "slo", "info", "warning", "benign")
# Level notes the analyzers write themselves; their findings come from LevelStats' fields instead.
_FROM_FIELDS = ("P99 from ", "requests did not get the requested", "requests streamed more token chunks")
# The sweep's notes (llmbench/sweep/run.py, kept in run.json's level_meta) by their opening words.
_META_KINDS = (
    ("INVALID: the client fell behind", "client_behind", "invalid", "the client fell behind"),
    (
        "requests sent but never reported",
        "records_missing",
        "invalid",
        "requests were sent but never reported by the client",
    ),
    ("the target stopped answering", "target_stopped", "invalid", "the target stopped answering"),
    (
        "the level did not finish",
        "cut_short",
        "caveat",
        "the level did not finish: its window is estimated from its first send to its last completion",
    ),
)


@dataclass
class Finding:
    kind: str
    severity: str
    text: str  # one sentence, naming the levels
    levels: list[str] = field(default_factory=list)
    detail: str = ""  # plain-words explanation (benign differences)

    def to_dict(self) -> dict:
        return asdict(self)


def _levels(items: list[tuple[str, str]]) -> str:
    """'c1 (59), c4 (80)' from (level, its own number)."""
    return ", ".join(f"{lv} ({v})" if v else lv for lv, v in items)


def run_findings(s: RunSummary) -> list[Finding]:
    out: list[Finding] = []
    info = s.info
    if info.status == "interrupted":
        out.append(
            Finding(
                "interrupted",
                "invalid",
                f"The run was interrupted: {len(info.levels_done)} levels "
                "finished; statistics cover what was measured.",
            )
        )
    elif info.status != "complete":
        out.append(
            Finding(
                "status",
                "invalid",
                f"The run's status is '{info.status}': it is still going, or it "
                f"was killed before it could record its end; {len(info.levels_done)} levels finished.",
            )
        )
    for name, status in (info.probes or {}).items():
        if str(status).startswith("failed"):
            # A probe that read nothing left the diagnosis without its evidence: said once, here.
            out.append(
                Finding(
                    "probe_failed",
                    "caveat",
                    f"The {name} probe recorded nothing: {str(status)[8:]}; the diagnosis could not use it.",
                    [],
                )
            )
        elif str(status).startswith("partial"):
            # A fleet's replica whose page was never read (probes/server.py): its sums leave it out.
            out.append(
                Finding(
                    "probe_partial",
                    "caveat",
                    f"The {name} probe measured only part of the target: "
                    f"{str(status)[9:]}; its fleet-wide figures leave that out.",
                    [],
                )
            )
    for a in info.target.adaptations or []:
        if isinstance(a, dict):
            what = " ".join(str(a[k]) for k in ("field", "action") if a.get(k))
            rest = "; ".join(f"{k}: {v}" for k, v in a.items() if k not in ("field", "action", "consequence"))
            text = f"The preflight adapted the requests to the target: {what or a}"
            text += f" — {a['consequence']}" if a.get("consequence") else ""
            out.append(Finding("adaptation", "caveat", text + (f" ({rest})" if rest else "") + "."))
        else:
            out.append(Finding("adaptation", "caveat", f"The preflight adapted the requests to the target: {a}."))
    out += _level_findings(s)
    by_id = {lv.level_id: lv for lv in s.levels}
    # A level that finished without a single record (the client lost them) has no row at all:
    # say so, with what the sweep noted, rather than let it vanish from the run.
    for level_id in [x for x in info.levels_done if x not in by_id]:
        meta = info.level_meta.get(level_id)
        why = "; ".join(n.removeprefix(INVALID_PREFIX) for n in (meta.notes if meta else []))
        out.append(
            Finding(
                "no_records",
                "invalid",
                f"{level_id} finished with no request recorded"
                + (f" ({why})" if why else "")
                + ": it is missing from every table.",
                [level_id],
            )
        )
    for ser in s.series:
        if ser.knee:
            nxt = ser.level_ids[ser.level_ids.index(ser.knee) + 1]
            a, b = by_id[ser.knee], by_id[nxt]
            out.append(
                Finding(
                    "knee",
                    "info",
                    f"{ser.key}: throughput stops scaling after {ser.knee} (the knee): "
                    f"{nxt} has {b.load / a.load:.3g}× the load but "
                    f"{b.output_tok_s / a.output_tok_s - 1:+.0%} throughput (scaling efficiency "
                    f"{s.scaling[nxt].efficiency:.2f}); added load became queueing.",
                    [ser.knee, nxt],
                )
            )
    return sorted(out, key=lambda f: SEVERITIES.index(f.severity))


def _level_findings(s: RunSummary) -> list[Finding]:
    groups: dict[str, list[tuple[str, str]]] = {}
    texts: dict[str, tuple[str, str]] = {}  # kind -> (severity, sentence opening)

    def add(kind: str, severity: str, opening: str, level: str, value: str = "") -> None:
        groups.setdefault(kind, []).append((level, value))
        texts.setdefault(kind, (severity, opening))

    for lv in s.levels:
        if lv.n_in_window == 0:
            add(
                "nothing_measured",
                "invalid",
                "Nothing was measured (no request was sent inside the window: "
                "the users were still busy with their warm-up requests, or the level was cut short; give it "
                "longer: --max-duration for a sized level, --duration for a fixed one)",
                lv.level_id,
            )
        _slo(lv, add)
        _counts(lv, add)
        _notes(lv, add, texts)
    _replicas(getattr(s, "replicas", []), add)
    out = []
    for kind, items in groups.items():
        severity, opening = texts[kind]
        out.append(
            Finding(
                kind, severity, f"{opening}: {_levels(items)}.", [lv for lv, _ in items], BENIGN_EXPLAINED.get(kind, "")
            )
        )
    return out


# A fleet's replicas (analyzers/stats/replicas.py): a share of the requests this far from even is
# a routing imbalance; a replica whose TTFT P99 is this many times the fastest one's, both with this
# many ok requests, is where the level's tail comes from.
REPLICA_SHARE_SLACK = 0.15
REPLICA_TAIL_RATIO = 2.0
REPLICA_MIN_OK = 20


def _replicas(shares, add) -> None:
    by_level: dict[str, list] = {}
    for r in shares:
        by_level.setdefault(r.level_id, []).append(r)
    for level_id, rs in by_level.items():
        if len(rs) < 2:
            continue
        even = 1 / len(rs)
        off = max(rs, key=lambda r: abs(r.request_share - even))
        if abs(off.request_share - even) > REPLICA_SHARE_SLACK:
            add(
                "replica_imbalance",
                "warning",
                "The fleet's requests were unevenly spread (a replica's share far "
                "from even: a router that avoids a slow replica, or one that does not balance)",
                level_id,
                f"replica {off.replica} {off.request_share:.0%}, even {even:.0%}",
            )
        judged = [r for r in rs if r.ok >= REPLICA_MIN_OK and r.ttft_p99_s]
        if len(judged) >= 2:
            slow = max(judged, key=lambda r: r.ttft_p99_s)
            fast = min(judged, key=lambda r: r.ttft_p99_s)
            if slow.ttft_p99_s >= REPLICA_TAIL_RATIO * fast.ttft_p99_s:
                add(
                    "replica_tail",
                    "warning",
                    f"One replica is the tail (its TTFT P99 at least "
                    f"{REPLICA_TAIL_RATIO:g}x the fastest replica's: look at that replica, not the fleet)",
                    level_id,
                    f"replica {slow.replica} {slow.ttft_p99_s * 1000:.0f} ms, replica {fast.replica} "
                    f"{fast.ttft_p99_s * 1000:.0f} ms",
                )


def _counts(lv: LevelStats, add) -> None:
    """What the level's counts say: errors, a thin P99, output lengths, token counts."""
    if lv.n_error + lv.n_timeout:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(lv.errors_by_kind.items()))
        add(
            "errors",
            "caveat",
            "Errors and timeouts",
            lv.level_id,
            f"{lv.n_error + lv.n_timeout} of {lv.n_in_window}, {lv.error_rate:.1%}: {kinds}",
        )
    if lv.ttft.n and lv.ttft.n < MIN_SAMPLES_FOR_P99:
        add(
            "p99_unreliable",
            "warning",
            f"P99 from fewer than {MIN_SAMPLES_FOR_P99} samples (unreliable)",
            lv.level_id,
            f"n={lv.ttft.n}",
        )
    if lv.output_len_unhonoured:
        # Only counts that say so (the server's usage, the client tokenizer), never estimates or a
        # `length` finish (analyzers.stats.token_accounting).
        longer = lv.output_len_longer
        split = f"{lv.output_len_unhonoured - longer} shorter, {longer} longer"
        add(
            "output_len",
            "warning",
            "Outputs of another length than requested, by the server's own count "
            "(shorter: it stopped before max_tokens, at EOS when ignore_eos was not sent or not honoured; "
            "longer: it did not honour max_tokens)",
            lv.level_id,
            f"{lv.output_len_unhonoured} of {lv.n_ok}, asked {lv.output_len}: {split}",
        )
    wrong = lv.token_count_mismatches - lv.multi_token_chunks
    if wrong > 0:
        add(
            "usage_below_chunks",
            "warning",
            "More token chunks streamed than the server's usage counts (its usage, or its stream, is wrong)",
            lv.level_id,
            f"{wrong} requests",
        )
    if lv.multi_token_chunks:
        add(
            "multi_token_chunks",
            "benign",
            "Some stream chunks carried more than one token",
            lv.level_id,
            f"{lv.multi_token_chunks} of {lv.n_ok} requests",
        )
    if lv.tokenizer_count_diff_mean is not None and abs(lv.tokenizer_count_diff_mean) >= TOKENIZER_DIFF_NOTE:
        add(
            "tokenizer_count",
            "benign",
            "The client's tokenizer counts a different number of output tokens than the server's usage",
            lv.level_id,
            f"{lv.tokenizer_count_diff_mean:+.0%}",
        )


def _notes(lv: LevelStats, add, texts: dict[str, tuple[str, str]]) -> None:
    """The level's notes, each kind once across levels (meta notes and arrivals with their own numbers)."""
    for note in lv.notes:
        if note.startswith(_FROM_FIELDS) or _arrivals(note, lv.level_id, add):
            continue
        if _TRACE_REPLAY.match(note):  # what a trace level replayed (reports/trace_words.py): a fact
            add("trace_replay", "info", "What the level replayed of its trace", lv.level_id, note)
            continue
        meta = next((m for m in _META_KINDS if note.startswith(m[0])), None)
        if meta:
            add(meta[1], meta[2], meta[3], lv.level_id, _parenthesis(note))
        else:  # a note of another kind: grouped with the same words (numbers aside)
            invalid = note.startswith(INVALID_PREFIX)  # a stall, an interruption: the tag says it
            words = note[len(INVALID_PREFIX) :] if invalid else note
            key = "note:" + re.sub(r"[\d.]+", "#", words)
            add(
                key,
                "invalid" if invalid else "warning",
                words[:1].upper() + words[1:] if key not in texts else texts[key][1],
                lv.level_id,
            )


def _slo(lv: LevelStats, add) -> None:
    for broke in lv.slo_broken:
        if broke == "no successful requests":
            add(
                "no_successes",
                "slo",
                "No successful requests (the level served nobody, so it missed the SLO)",
                lv.level_id,
            )
            continue
        counted = _COUNTED.match(broke)  # "TTFT P99 > 3 s counting the 23 requests ... (bound 100 ms)"
        if counted:
            name, value, limit = counted.groups()
        else:  # "TTFT P99 250 ms > 100 ms"
            metric, bound, limit = broke.partition(" > ")
            if not bound:  # a stall or an interruption: said once as the level's INVALID note, not a bound
                continue
            name = " ".join(metric.split()[:2])  # "TTFT P99"
            value = metric[len(name) :].strip()
        add(f"over_slo:{name}", "slo", f"Over the SLO on {name} (bound {limit})", lv.level_id, value)


# A bound broken with failed requests counted (analyzers.stats.slo.Slos.broken_words).
_COUNTED = re.compile(r"^(\w+ P[\d.]+) (.+ counting the .+) \(bound ([^)]+)\)$")


# A trace level's note on what it replayed: once, its first part, or cycled (rundir.trace_replay).
_TRACE_REPLAY = re.compile(r"^(the first .+ of )?the trace \(\d+ requests, ")
_ARRIVALS = re.compile(
    r"arrivals: offered ([\d.]+) req/s .*achieved ([\d.]+) req/s[^,]*(?:, send lag P99 ([\d.]+) ms)?"
)
ARRIVALS_SHORT = 0.9  # achieved under this share of offered: the client did not send the load


def _arrivals(note: str, level_id: str, add) -> bool:
    """An open-loop level's offered / achieved arrival rates: each level with its own numbers (the
    generic grouping would print the first level's numbers for all)."""
    m = _ARRIVALS.match(note)
    if m is None:
        return False
    offered, achieved, lag = float(m.group(1)), float(m.group(2)), m.group(3)
    own = f"{m.group(1)} → {m.group(2)}" + (f", lag {lag} ms" if lag else "")
    if achieved < ARRIVALS_SHORT * offered:
        add(
            "arrivals_short",
            "warning",
            "The client sent fewer arrivals than the plan offered in the window "
            "(offered → achieved req/s, send lag P99)",
            level_id,
            own,
        )
    else:
        add(
            "arrivals",
            "info",
            "Arrivals as offered (offered → achieved req/s in the window, send lag P99)",
            level_id,
            own,
        )
    return True


def _parenthesis(note: str) -> str:
    m = re.search(r"\((.*)\)", note)
    return m.group(1) if m else ""


BENIGN_EXPLAINED = {
    "multi_token_chunks": (
        "The server's usage counts tokens; the stream counts chunks. Some servers put two or more tokens in "
        "one chunk (an incremental detokenizer holds back a token that ends mid-character and sends it with "
        "the next one; vLLM's stream interval does it on purpose), so a request can have fewer chunks than "
        "tokens. Nothing is lost: TPOT and throughput use the usage count, and throughput spreads a "
        "request's tokens evenly over its chunks' arrival times. ITL is the gap between chunks."
    ),
    "tokenizer_count": (
        "The client re-tokenizes the streamed text with its own tokenizer. Decoding token ids to text and "
        "encoding the text again need not give the same ids (merges across chunk boundaries, special "
        "tokens, a different tokenizer), so the two counts differ a little. The server's usage is the "
        "count every statistic uses."
    ),
}
