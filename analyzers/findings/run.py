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

from dataclasses import asdict, dataclass, field
from typing import Any

from analyzers.findings.level_counts import BENIGN_EXPLAINED, count_findings, slo_findings
from analyzers.findings.level_notes import note_findings
from analyzers.findings.replicas import replica_findings
from analyzers.validity import INVALID_PREFIX

RunSummary = Any  # analyzers.summary.RunSummary, which imports this module (no import back)

SEVERITIES = ("invalid", "caveat", "slo", "info", "warning", "benign")


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
        if ser.knee and ser.past_knee:
            nxt = ser.past_knee
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
        slo_findings(lv, add)
        count_findings(lv, add)
        note_findings(lv, add, texts)
    replica_findings(getattr(s, "replicas", []), add)
    out = []
    for kind, items in groups.items():
        severity, opening = texts[kind]
        out.append(
            Finding(
                kind, severity, f"{opening}: {_levels(items)}.", [lv for lv, _ in items], BENIGN_EXPLAINED.get(kind, "")
            )
        )
    return out
