"""report.md and compare.md: the same content as the HTML minus the figures, for pull requests and
chat. Text from the run is escaped (`md`) so a model name or error string cannot break a table or
inject HTML into a renderer that allows it."""

from __future__ import annotations

import html
import re

from analyzers.capacity.answer import answer_in
from analyzers.compare import MIN_EFFECT, Comparison
from analyzers.summary import RunSummary
from reports import tables
from reports.answer import AnswerItem, build_answer
from reports.capacity_table import CAPACITY_HEADER, CAPACITY_NOTE, capacity_rows
from reports.compare_answer import compare_answer
from reports.definitions import DEFINITIONS, OTHER_TOOLS, OTHER_TOOLS_HEADER
from reports.prediction_table import HTML_HEADER, html_rows
from reports.prediction_words import band_caption, departure_sentences, offline_line, scope_line, unpredicted_line
from reports.terminal import fmt_ci, fmt_delta, fmt_value, verdict_words

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#])")


def md(text) -> str:
    """Escape Markdown and HTML specials and fold newlines, so text stays text inside a table cell."""
    s = html.escape(str(text), quote=False)
    return _MD_SPECIAL.sub(r"\\\1", s).replace("\r", " ").replace("\n", " ")


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(md(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(md(c) for c in r) + " |" for r in rows]
    return out + [""]


def _definitions() -> list[str]:
    out = ["## Metric definitions", ""] + md_table(["metric", "definition"], [list(d) for d in DEFINITIONS])
    return out + ["Other tools' names:", ""] + md_table(list(OTHER_TOOLS_HEADER), [list(r) for r in OTHER_TOOLS])


def md_answer(items: list[AnswerItem]) -> list[str]:
    out = []
    for a in items:
        out.append(f"- **{md(a.label)}**: {md(a.text)}")
        out += [f"  - {md(e)}" for e in a.evidence]
    return out + [""]


def render_report_md(s: RunSummary, diagnosis: dict | None = None) -> str:
    out = [
        f"# llmbench report: {md(s.info.run_id)}",
        "",
        f"{md(s.info.status)} · model {md(s.info.target.model)} · SLO {md(s.slos.describe())}",
        "",
    ]
    out += ["## Answer", ""] + md_answer(build_answer(s, diagnosis))
    findings = [f for f in s.finding_groups if f.severity != "benign"]
    benign = [f for f in s.finding_groups if f.severity == "benign"]
    predicted = departure_sentences(s.prediction) if s.prediction is not None else []
    out += ["## Findings", ""] + [f"- **{f.severity}** {md(f.text)}" for f in findings]
    out += [f"- **prediction** {md(t)}" for t in predicted] + (["- none"] if not findings and not predicted else [])
    if benign:
        out += ["", f"<details><summary>{len(benign)} expected difference(s), explained</summary>", ""]
        out += [f"**{md(f.text)}** {md(f.detail)}\n" for f in benign] + ["</details>"]
    capacity = answer_in(s.info.sweep)
    if capacity is not None:
        out += ["", "## Capacity search", ""] + md_table(CAPACITY_HEADER, capacity_rows(capacity)) + [md(CAPACITY_NOTE)]
    out += ["", "## Summary", ""] + md_table(tables.SUMMARY_HEADER, tables.summary_rows(s))
    if s.classes:
        out += ["", "### Request classes (per prompt length)", ""] + md_table(
            tables.SUMMARY_HEADER, tables.summary_rows(s, s.classes)
        )
    if s.replicas:
        out += ["", "### Replicas (which one served each request)", ""] + md_table(
            tables.REPLICA_HEADER, tables.replica_rows(s)
        )
    out += ["\\* P99 from fewer than 100 samples (unreliable). Figures: see report.html.", ""]
    if s.prediction is not None and s.prediction.levels:
        said = [scope_line(s.prediction), offline_line(s.prediction), unpredicted_line(s.prediction)]
        out += ["## Predicted vs measured", "", md(" ".join(x for x in said if x)), ""]
        out += md_table(HTML_HEADER, html_rows(s.prediction)) + [md(band_caption()), ""]
    out += ["## Scaling", ""] + md_table(tables.SCALING_HEADER, tables.scaling_rows(s))
    errors = tables.error_rows(s)
    out += ["## Errors", ""] + (
        md_table(["level", "kind", "count", "rate", "first error text"], errors)
        if errors
        else ["No errors or timeouts in any measured window.", ""]
    )
    if diagnosis:
        out += [
            "## Diagnosis: why the tail is bad",
            "",
            f"**{md(diagnosis['headline'])}** "
            f"({diagnosis['metric'].upper()} tail, {len(diagnosis['spike_windows'])} spike windows; `llmdiag p99`)",
            "",
        ]
        if diagnosis["findings"]:
            out += md_table(
                ["#", "category", "severity", "finding", "next step"],
                [
                    [str(i), f["category"], f["severity"], f["title"], f["next_step"]]
                    for i, f in enumerate(diagnosis["findings"], 1)
                ],
            ) + [""]
    out += ["## All percentiles", ""] + md_table(tables.DETAIL_HEADER, tables.detail_rows(s))
    out += ["### What was sent and received", ""] + md_table(
        ["level", "target in/out", "prompt tokens mean (min–max)", "output tokens mean (min–max)"],
        tables.length_rows(s),
    )
    out += ["## Run configuration and target", ""] + md_table(["", ""], [list(r) for r in tables.config_rows(s.info)])
    return "\n".join(out + _definitions())


def render_compare_md(comparisons: list[Comparison], min_effect: float = MIN_EFFECT) -> str:
    out = ["# llmbench comparison", ""]
    for c in comparisons:
        n = c.counts()
        out += [f"## A = {md(c.run_a)} · B = {md(c.run_b)}", "", "### Verdict", ""] + md_answer(compare_answer(c))
        out += [
            f"{n['better']} better, {n['worse']} worse, {n['within noise']} within noise (B − A with its 95% "
            f"bootstrap interval; within noise: the interval contains 0 or the change is under "
            f"{min_effect * 100:g}%).",
            "",
        ]
        if c.only_a or c.only_b:
            out += [
                f"Skipped levels: only in A: {md(', '.join(c.only_a) or '—')}; "
                f"only in B: {md(', '.join(c.only_b) or '—')}.",
                "",
            ]
        rows = [
            [
                lc.level_id if i == 0 else "",
                d.metric,
                fmt_value(d.metric, d.a),
                fmt_value(d.metric, d.b),
                fmt_delta(d),
                fmt_ci(d.metric, d.ci),
                verdict_words(d),
            ]
            for lc in c.levels
            for i, d in enumerate(lc.deltas)
        ]
        out += md_table(["level", "metric", "A", "B", "B − A", "95% CI of B − A", "verdict"], rows)
    return "\n".join(out + _definitions())
