"""What a comparison leads with: the verdict per metric and level, grouped the way a run's findings
are (each metric said once with the levels where it moved), and the verdict matrix (levels ×
metrics) that shows the whole comparison at a glance."""

from __future__ import annotations

from analyzers.compare import Comparison
from reports.answer import AnswerItem

ARROW = {"better": "better", "worse": "worse"}


def compare_answer(c: Comparison) -> list[AnswerItem]:
    n = c.counts()
    items = []
    for verdict, tone in (("worse", "bad"), ("better", "good")):
        by_metric: dict[str, list[str]] = {}
        for lc in c.levels:
            for d in lc.deltas:
                if d.verdict == verdict:
                    rel = f" {d.rel:+.1%}" if d.rel is not None else ""
                    by_metric.setdefault(d.metric, []).append(f"{lc.level_id}{rel}")
        if by_metric:
            order = list(dict.fromkeys(d.metric for lc in c.levels for d in lc.deltas))
            lines = [f"{metric}: {', '.join(by_metric[metric])}" for metric in order if metric in by_metric]
            items.append(
                AnswerItem(
                    f"B is {verdict} than A",
                    f"on {len(by_metric)} metric(s), {n[verdict]} level-metric pair(s).",
                    tone,
                    lines,
                )
            )
    if not items:
        items.append(
            AnswerItem(
                "Verdict",
                f"B and A are within noise on every shared metric and level ({n['within noise']} pairs).",
                "good" if c.levels else "neutral",
            )
        )
    else:
        items.append(
            AnswerItem("Within noise", f"{n['within noise']} level-metric pair(s); {n['n/a']} without data.", "neutral")
        )
    if c.only_a or c.only_b:
        items.append(
            AnswerItem(
                "Not compared",
                f"only in A: {', '.join(c.only_a) or '—'}; only in B: {', '.join(c.only_b) or '—'}.",
                "warn",
            )
        )
    return items


def verdict_matrix(c: Comparison) -> tuple[list[str], list[list[tuple[str, str]]]]:
    """(metric names, rows): each row is the level id then (text, css class) per metric."""
    metrics = list(dict.fromkeys(d.metric for lc in c.levels for d in lc.deltas))
    rows = []
    for lc in c.levels:
        by = {d.metric: d for d in lc.deltas}
        row = [(lc.level_id, "l")]
        for m in metrics:
            d = by.get(m)
            if d is None or d.verdict == "n/a":
                row.append(("—", "noise"))
            elif d.verdict == "within noise":
                row.append(("≈", "noise"))
            else:
                rel = f"{d.rel:+.0%}" if d.rel is not None else d.verdict
                row.append((rel, ARROW[d.verdict]))
        rows.append(row)
    return metrics, rows
