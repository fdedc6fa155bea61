"""The answer a report leads with, in four lines: how far it scales within the SLO, where throughput
stops growing, why the tail is what it is, and whether the run can be trusted.

When the user gave no SLO (run.json's `slos.default`), the default's verdict is no answer: it is a
GPU server's, and on a CPU engine "even the lowest load missed it" hides what the data says. The
answer then leads with the ceiling and the knee, and the SLO each level would meet
(analyzers.stats.slo_reach), and says last how the default fared.

Built once from the run's summary and its diagnosis (diagnosis_p99.json, when `llmdiag p99` or the
sweep wrote one) as plain text; report.html, report.md and the terminal render the same items.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from analyzers.capacity.answer import answer_in
from analyzers.stats.slo_reach import SloReach, slo_reach
from analyzers.summary import RunSummary
from reports.capacity_words import capacity_headline
from reports.evidence_words.sentences import evidence_sentences
from reports.terminal import load_label
from rundir.capacity import CapacityAnswer

TONES = ("good", "bad", "warn", "neutral")


@dataclass
class AnswerItem:
    label: str  # "Highest load within the SLO", "Ceiling", ...
    text: str
    tone: str = "neutral"  # good | bad | warn | neutral
    evidence: list[str] = field(default_factory=list)


def _ci(ci, digits: int = 0) -> str:
    return f" (95% CI {ci[0]:.{digits}f}–{ci[1]:.{digits}f})" if ci else ""


def _ms(v) -> str:
    return "—" if v is None else f"{v * 1000:.0f} ms"


def build_answer(s: RunSummary, diagnosis: dict | None = None) -> list[AnswerItem]:
    if s.slos.default and answer_in(s.info.sweep) is None:
        return [*_ceiling(s), *_reach(s), *_within_slo(s), _diagnosis(diagnosis), _validity(s, diagnosis)]
    return [*_within_slo(s), *_ceiling(s), _diagnosis(diagnosis), _validity(s, diagnosis)]


def _up2(seconds: float) -> str:
    """A bound a measured value meets, rounded up to two significant digits: 412 ms -> 420 ms."""
    ms = seconds * 1000
    if ms <= 0:
        return "0 ms"
    step = 10 ** (math.floor(math.log10(ms)) - 1)
    up = math.ceil(round(ms / step, 2)) * step  # 60.00001 (float noise of epoch times) is 60
    return f"{up:g} ms" if up < 10_000 else f"{up / 1000:g} s"


def _reach_words(r: SloReach) -> str:
    parts = [
        "TTFT P99 unbounded (requests failed before a first token)"
        if r.ttft_unbounded
        else f"TTFT P99 ≤ {_up2(r.ttft_p99_s)}"
        if r.ttft_p99_s is not None
        else None,
        f"TPOT P95 ≤ {_up2(r.tpot_p95_s)}" if r.tpot_p95_s is not None else None,
        f"E2E P99 ≤ {_up2(r.e2e_p99_s)}" if r.e2e_p99_s is not None else None,
    ]
    flag = "" if r.p99_reliable else f" (P99 from {r.n} requests)"
    return f"{r.level_id} meets " + ", ".join(p for p in parts if p) + flag


def _reach(s: RunSummary) -> list[AnswerItem]:
    """The SLO each measured level would meet, per series."""
    by_id = {lv.level_id: lv for lv in s.levels}
    items = []
    for ser in s.series:
        prefix = f"{ser.key}: " if len(s.series) > 1 else ""
        reach = [r for r in (slo_reach(by_id[i], s.slos.e2e_p99_s is not None) for i in ser.level_ids) if r]
        if reach:
            items.append(
                AnswerItem(
                    "SLO each level meets",
                    prefix + "; ".join(_reach_words(r) for r in reach) + ".",
                    "neutral",
                    ["its own percentiles, rounded up: point estimates, not verdicts"],
                )
            )
    return items


def _within_slo(s: RunSummary) -> list[AnswerItem]:
    capacity = answer_in(s.info.sweep)
    if capacity is not None:  # a capacity search: its pooled, re-measured answer, not one level's
        return [_capacity_item(capacity)]
    by_id = {lv.level_id: lv for lv in s.levels}
    items = []
    default = s.slos.default
    label = "Highest load within the default SLO" if default else "Highest load within the SLO"
    the_slo = "the default SLO" if default else "the SLO"
    for ser in s.series:
        prefix = f"{ser.key}: " if len(s.series) > 1 else ""
        measured = [by_id[i] for i in ser.level_ids if by_id[i].n_in_window]
        if not measured:
            continue
        if ser.best_within_slo:
            lv = by_id[ser.best_within_slo]
            text = (
                f"{prefix}{lv.level_id} (load {load_label(lv)}): {lv.output_tok_s:.1f} output tok/s"
                f"{_ci(lv.output_tok_s_ci, 1)}, goodput {lv.goodput_req_s:.2f} req/s"
                f"{_ci(lv.goodput_req_s_ci, 2)}; TTFT P99 {_ttft_p99(lv)}, "
                f"TPOT P95 {_ms(lv.tpot.p['p95'])} against {s.slos.describe()}."
            )
            if lv is measured[-1]:
                text += " It is the highest load tested: the limit lies above it."
            items.append(AnswerItem(label, text, "good", _default_evidence(s) if default else []))
        else:
            low = measured[0]
            why = "; ".join(low.slo_broken) or "no verdict"
            # A level without a verdict (cut short, its client behind the server) did not miss the SLO.
            verb = f"missed {the_slo}" if low.slo_met is False else "has no SLO verdict"
            # Missing a default nobody chose is a fact about the default, not a failure of the target.
            items.append(
                AnswerItem(
                    label,
                    f"{prefix}none: even the lowest load, {low.level_id}, {verb} ({why}).",
                    "warn" if default else "bad",
                    _default_evidence(s) if default else [],
                )
            )
    if not items:
        items.append(AnswerItem(label, "nothing was measured.", "bad"))
    return items


def _default_evidence(s: RunSummary) -> list[str]:
    return [
        f"no --slo-ttft/--slo-tpot given: the default, {s.slos.describe()}, a GPU server's; judge this run "
        "by yours with `llmbench report RUN_DIR --slo-ttft S --slo-tpot S`"
    ]


def _ttft_p99(lv) -> str:
    """The TTFT P99 the verdict used: with failed requests counted, when some failed (analyzers.stats.slo)."""
    failed = lv.n_failed_no_token + lv.n_failed_mid_stream
    if not failed:
        return _ms(lv.ttft.p["p99"])
    return (
        f"{_ms(lv.ttft_p99_with_failures_s)} counting the {failed} of "
        f"{lv.n_ok + lv.n_error + lv.n_timeout} requests that failed"
    )


def _capacity_item(a: CapacityAnswer) -> AnswerItem:
    # A capacity no load establishes (too few requests) is a point estimate: a warning, not a result.
    tone = "bad" if a.capacity is None else "good" if a.bounded_by == "slo" and a.low is not None else "warn"
    verdicts = {v: [f"{x.load:g}" for x in a.loads if x.verdict == v] for v in ("in", "unclear", "out")}
    evidence = [f"{v}: {', '.join(loads)}" for v, loads in verdicts.items() if loads]
    evidence.append("each load's levels pooled (the capacity search table)")
    return AnswerItem("Capacity (search)", capacity_headline(a) + ".", tone, evidence)


def _ceiling(s: RunSummary) -> list[AnswerItem]:
    by_id = {lv.level_id: lv for lv in s.levels}
    items = []
    for ser in s.series:
        prefix = f"{ser.key}: " if len(s.series) > 1 else ""
        # The peak among levels whose window measured a rate (docs/metrics.md), not one phase of a request.
        measured = [by_id[i] for i in ser.level_ids if by_id[i].n_ok and by_id[i].steady_output_tok_s is not None]
        if not measured:
            continue
        peak = max(measured, key=lambda lv: lv.output_tok_s)
        text = (
            f"{prefix}throughput peaks at {peak.output_tok_s:.1f} output tok/s{_ci(peak.output_tok_s_ci, 1)} at "
            f"{peak.level_id}"
        )
        if ser.knee and ser.past_knee:
            nxt = ser.past_knee
            eff, a, b = s.scaling[nxt].efficiency, by_id[ser.knee], by_id[nxt]
            if eff is not None and eff < 0:
                text += (
                    f"; the knee is {ser.knee}: from there to {nxt} the load grew {b.load / a.load:.3g}× and "
                    f"throughput fell ({b.output_tok_s / a.output_tok_s - 1:+.0%})."
                )
            else:
                text += (
                    f"; the knee is {ser.knee}: from there to {nxt} only {eff or 0:.0%} of the added load "
                    "became throughput, the rest queueing."
                )
            items.append(AnswerItem("Ceiling", text, "warn"))
        elif len(measured) > 1:
            last = s.scaling[measured[-1].level_id].efficiency
            more = f" (efficiency {last:.2f} on the last step)" if last is not None else ""
            items.append(
                AnswerItem(
                    "Ceiling",
                    text + f"; it still scaled at the highest load tested{more}: the ceiling lies beyond.",
                    "neutral",
                )
            )
        else:
            items.append(AnswerItem("Ceiling", text + " (one level: no scaling to judge).", "neutral"))
    return items


def _diagnosis(d: dict | None) -> AnswerItem:
    label = "Why the tail"
    if not d:
        return AnswerItem(
            label,
            "not diagnosed: `llmdiag p99 RUN` checks network, scheduling and host against the latency spikes.",
            "neutral",
        )
    spikes = len(d.get("spike_windows") or [])
    findings = d.get("findings") or []
    metric = d.get("metric", "ttft").upper()
    where = (
        f"{metric} tail, {spikes} spike window(s) over {d.get('spike_seconds', 0.0):.1f} s"
        if spikes
        else f"{metric} tail: standing, no spike windows"
    )
    if not findings:
        return AnswerItem(label, f"{d.get('headline', 'no cause found')} ({where}).", "neutral")
    top = findings[0]
    # A few sentences; every number is in the report's Diagnosis table (and diagnosis_p99.json).
    # Without spikes the windows a finding explains are its levels' spans (standing tails).
    evidence = evidence_sentences(
        {**top, "kind": top.get("kind") or ("spike" if spikes else "standing")}, d.get("metric", "ttft")
    )
    others = len(findings) - 1
    more = f"; {others} more finding(s) below" if others else ""
    return AnswerItem(
        label,
        f"{top.get('category', '')}: {d.get('headline', top.get('title', ''))} ({where}{more}).",
        "bad" if top.get("severity") == "high" else "warn",
        evidence,
    )


def _validity(s: RunSummary, diagnosis: dict | None = None) -> AnswerItem:
    bad = [f.text for f in s.finding_groups if f.severity in ("invalid", "caveat")]
    # The diagnosis' own check of the client (its send lag against the tail) is a caveat on the P99.
    client = [f for f in (diagnosis or {}).get("findings") or [] if f.get("category") == "client"]
    caveats = [f"The P99 diagnosis: {f.get('title', '')}." for f in client]
    if not bad and not caveats:
        return AnswerItem(
            "Validity",
            "nothing found that undermines the numbers: the run completed, the client "
            "kept up, no errors, no adaptations.",
            "good",
        )
    invalid = any(f.severity == "invalid" for f in s.finding_groups)
    head = "not valid as it stands" if invalid else "valid, with caveats"
    return AnswerItem("Validity", head + ".", "bad" if invalid else "warn", bad + caveats)
