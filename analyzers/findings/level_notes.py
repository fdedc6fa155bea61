"""A level's notes as findings of the run, each kind once across levels: the sweep's notes (the client
fell behind, records missing, the target stopped, the level cut short), open-loop arrivals with each
level's own numbers, what a trace level replayed, and any other note grouped by its words."""

from __future__ import annotations

import re

from analyzers.cached_prompts import CACHED_NOTE_OPENING
from analyzers.stats.latency import LevelStats
from analyzers.validity import INVALID_PREFIX

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
        CACHED_NOTE_OPENING,
        "cached_prompts",
        "caveat",
        "the server found these levels' unshared prompts in its prefix cache (the share of their tokens): "
        "their TTFT is partly a cache hit's; an earlier run with the same --seed against this server? "
        "Rerun with another --seed or a fresh server",
    ),
    (
        "the level did not finish",
        "cut_short",
        "caveat",
        "the level did not finish: its window is estimated from its first send to its last completion",
    ),
)


def note_findings(lv: LevelStats, add, texts: dict[str, tuple[str, str]]) -> None:
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
