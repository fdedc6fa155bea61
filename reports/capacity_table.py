"""The loads a `llmbench capacity` search measured, as the report shows them: each load's levels
pooled, its verdict against the SLO and what it rests on (the requests over each bound), with the
percentiles and their bootstrap intervals beside it."""

from __future__ import annotations

from reports.grid import Column, Grid
from rundir.capacity import CapacityAnswer

CAPACITY_HEADER = [
    "load",
    "levels",
    "verdict",
    "requests",
    "over the bound",
    "TTFT P99 ms [95% CI]",
    "TPOT P95 ms [95% CI]",
    "goodput req/s",
    "output tok/s",
]


def _ms(value: float | None, ci: list[float] | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f}" + (f" [{ci[0] * 1000:.0f}, {ci[1] * 1000:.0f}]" if ci else "")


def _over(counts: dict[str, int], design_effect: dict[str, float]) -> str:
    """{"TTFT P99": 0, "TPOT P95": 12} -> "TTFT 0, TPOT 12 (in bursts: each counts 1/4.5)" (the requests
    column holds the n; the design effect only when the requests over the bound came clustered)."""

    def one(name: str, k: int) -> str:
        d = design_effect.get(name, 1.0)
        return f"{name.split()[0]} {k}" + (f" (in bursts: each counts 1/{d:.1f})" if d > 1.05 else "")

    return ", ".join(one(name, k) for name, k in counts.items()) or "—"


def capacity_rows(answer: CapacityAnswer) -> list[list[str]]:
    unit = " req/s" if answer.axis == "rate" else ""
    return [
        [
            f"{v.load:g}{unit}",
            ", ".join(v.level_ids),
            v.verdict
            + (" (" + "; ".join(v.reasons) + ")" if v.reasons else " (too few requests)" if v.too_few else ""),
            str(v.n),
            _over(v.over_bound, v.design_effect),
            _ms(v.ttft_p99_s, v.ttft_p99_ci),
            _ms(v.tpot_p95_s, v.tpot_p95_ci),
            f"{v.goodput_req_s:.2f}",
            f"{v.output_tok_s:.1f}",
        ]
        for v in answer.loads
    ]


CAPACITY_NOTE = (
    "in: every bound is established by the requests over it (an exact binomial test at 95%: a P99 "
    "needs at least 299 requests with none over the bound, a P95 59; requests over it in bursts, as one "
    "stall makes them in closed loop, count as fewer independent ones) and every level of the load met "
    "it; out: a bound is clearly broken, or a level was stopped over capacity, had more than 5% errors, "
    "or the client fell behind; unclear: otherwise (too few requests: none over, but not enough to "
    "establish it). The answer is the highest load whose pooled point estimates meet the SLO below the "
    "lowest `out` load."
)


def capacity_grid(answer: CapacityAnswer) -> Grid:
    """The rows as `llmbench capacity` prints them (reports/grid.py): the levels and the verdict's
    reasons wrap between words; each figure stays on one line."""
    wraps = {"levels", "verdict"}
    return Grid(
        "capacity search (requests pooled over each load's levels)",
        [Column(c, wrap=c in wraps) for c in CAPACITY_HEADER],
        [list(r) for r in capacity_rows(answer)],
    )
