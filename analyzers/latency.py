"""Per-level latency and throughput statistics with DESIGN section 4's definitions.

Percentiles are numpy's linear interpolation, always reported with their sample count; a P99
from fewer than 100 samples is flagged. Only requests sent inside the measured window count,
and errors are counted next to every row rather than silently left out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from llmbench.rundir import RequestRecord

PERCENTILES = (50, 90, 95, 99, 99.9)
MIN_SAMPLES_FOR_P99 = 100
DEFAULT_SLOS = {"ttft_p99_s": 1.5, "tpot_p95_s": 0.050}


@dataclass
class Distribution:
    n: int
    mean: float | None
    p: dict[str, float | None]          # "p50", "p90", "p95", "p99", "p99.9"
    p99_reliable: bool

    @classmethod
    def of(cls, values) -> "Distribution":
        arr = np.asarray([v for v in values if v is not None], dtype=float)
        if arr.size == 0:
            return cls(0, None, {_pname(q): None for q in PERCENTILES}, False)
        qs = np.percentile(arr, PERCENTILES, method="linear")
        return cls(int(arr.size), float(arr.mean()), {_pname(q): float(v) for q, v in zip(PERCENTILES, qs)},
                   arr.size >= MIN_SAMPLES_FOR_P99)


def _pname(q: float) -> str:
    return f"p{q:g}"


@dataclass
class LevelStats:
    level_id: str
    concurrency: int | None
    request_rate: float | None
    input_len: int
    output_len: int
    window_s: float
    n_sent: int
    n_in_window: int
    n_ok: int
    n_error: int
    n_timeout: int
    n_cancelled: int
    errors_by_kind: dict[str, int]
    ttft: Distribution
    tpot: Distribution
    itl: Distribution
    e2e: Distribution
    send_lag: Distribution
    output_tok_s: float
    total_tok_s: float
    req_s: float
    goodput_req_s: float
    slo_met: bool | None
    token_count_mismatches: int
    output_len_unhonoured: int
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def summarize_level(records: list[RequestRecord], level_id: str, window_s: float,
                    slos: dict[str, float] | None = None) -> LevelStats:
    """Statistics of one level from its records; `window_s` is the measured window's length."""
    slos = {**DEFAULT_SLOS, **(slos or {})}
    if window_s <= 0:
        raise ValueError(f"the measured window must be positive, got {window_s}")
    mine = [r for r in records if r.level_id == level_id]
    win = [r for r in mine if r.in_window]
    ok = [r for r in win if r.status == "ok"]
    first = mine[0] if mine else None
    errors: dict[str, int] = {}
    for r in win:
        if r.status != "ok" and r.error_kind:
            errors[r.error_kind] = errors.get(r.error_kind, 0) + 1

    def out_tokens(r: RequestRecord) -> int:
        return r.completion_tokens if r.completion_tokens is not None else (r.client_completion_tokens or 0)

    def in_tokens(r: RequestRecord) -> int:
        return r.prompt_tokens if r.prompt_tokens is not None else (r.client_prompt_tokens or 0)

    out_total = sum(out_tokens(r) for r in ok)
    in_total = sum(in_tokens(r) for r in ok)
    ttft_slo, tpot_slo = slos["ttft_p99_s"], slos["tpot_p95_s"]
    good = [r for r in ok if r.ttft_s is not None and r.ttft_s <= ttft_slo and (r.tpot_s is None or r.tpot_s <= tpot_slo)]
    ttft, tpot = Distribution.of(r.ttft_s for r in ok), Distribution.of(r.tpot_s for r in ok)
    slo_met = None
    if ttft.n:
        slo_met = ttft.p["p99"] <= ttft_slo and (tpot.n == 0 or tpot.p["p95"] <= tpot_slo)
    mismatches = sum(1 for r in ok if r.completion_tokens is not None and r.client_completion_tokens is not None
                     and r.completion_tokens != r.client_completion_tokens)
    unhonoured = sum(1 for r in ok if out_tokens(r) != r.target_output_len)
    notes = []
    if ttft.n and not ttft.p99_reliable:
        notes.append(f"P99 from {ttft.n} samples (< {MIN_SAMPLES_FOR_P99}) is unreliable")
    if unhonoured:
        notes.append(f"{unhonoured} requests did not get the requested {first.target_output_len if first else '?'} "
                     "output tokens (server ignored max_tokens/ignore_eos?)")
    return LevelStats(
        level_id=level_id, concurrency=first.concurrency if first else None,
        request_rate=first.request_rate if first else None,
        input_len=first.target_input_len if first else 0, output_len=first.target_output_len if first else 0,
        window_s=window_s, n_sent=len(mine), n_in_window=len(win), n_ok=len(ok),
        n_error=sum(1 for r in win if r.status == "error"), n_timeout=sum(1 for r in win if r.status == "timeout"),
        n_cancelled=sum(1 for r in win if r.status == "cancelled"), errors_by_kind=errors,
        ttft=ttft, tpot=tpot, itl=Distribution.of(x for r in ok for x in r.itl_s),
        e2e=Distribution.of(r.e2e_s for r in ok), send_lag=Distribution.of(r.send_lag_s for r in win),
        output_tok_s=out_total / window_s, total_tok_s=(out_total + in_total) / window_s,
        req_s=len(ok) / window_s, goodput_req_s=len(good) / window_s, slo_met=slo_met,
        token_count_mismatches=mismatches, output_len_unhonoured=unhonoured, notes=notes)


def ceiling_notes(levels: list[LevelStats], gain_threshold: float = 0.10) -> dict[str, str]:
    """A plain-language note per level, in the seed's case-study words: where added load stops
    adding throughput (the ceiling) and where the SLO breaks."""
    notes: dict[str, str] = {}
    prev = None
    for lv in levels:
        if lv.n_ok == 0:
            notes[lv.level_id] = "no successful requests"
        elif lv.slo_met is False:
            notes[lv.level_id] = "over SLO"
        elif prev is not None and prev.output_tok_s > 0 and lv.output_tok_s < prev.output_tok_s * (1 + gain_threshold):
            notes[lv.level_id] = "near ceiling"
        else:
            notes[lv.level_id] = "normal"
        prev = lv
    return notes


def best_level_within_slo(levels: list[LevelStats]) -> LevelStats | None:
    """The highest-throughput level that met every SLO: the answer to 'how far does it scale'."""
    ok = [lv for lv in levels if lv.slo_met]
    return max(ok, key=lambda lv: lv.output_tok_s) if ok else None
