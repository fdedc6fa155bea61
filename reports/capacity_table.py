"""The loads a `llmbench capacity` search measured, as the report shows them: each load's levels
pooled, its verdict against the SLO and why, with the bootstrap intervals the verdict rests on."""

from __future__ import annotations

from analyzers.capacity_answer import CapacityAnswer

CAPACITY_HEADER = ["load", "levels", "verdict", "requests", "TTFT P99 ms [95% CI]", "TPOT P95 ms [95% CI]",
                   "goodput req/s", "output tok/s"]


def _ms(value: float | None, ci: list[float] | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f}" + (f" [{ci[0] * 1000:.0f}, {ci[1] * 1000:.0f}]" if ci else "")


def capacity_rows(answer: CapacityAnswer) -> list[list[str]]:
    unit = " req/s" if answer.axis == "rate" else ""
    return [[f"{v.load:g}{unit}", ", ".join(v.level_ids),
             v.verdict + (" (" + "; ".join(v.reasons) + ")" if v.reasons else ""), str(v.n),
             _ms(v.ttft_p99_s, v.ttft_p99_ci), _ms(v.tpot_p95_s, v.tpot_p95_ci), f"{v.goodput_req_s:.2f}",
             f"{v.output_tok_s:.1f}"] for v in answer.loads]


CAPACITY_NOTE = ("in: the whole 95% interval of every bound is within the SLO and every level of the load met it; "
                 "out: a whole interval is past a bound, or a level was stopped over capacity, had more than 5% "
                 "errors, or the client fell behind; unclear: otherwise. The answer is the highest load whose "
                 "pooled point estimates meet the SLO below the lowest `out` load.")
