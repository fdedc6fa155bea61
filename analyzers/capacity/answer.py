"""The capacity answer: the highest load within the SLO, with an interval, from re-measured levels.

Each load the search measured (one or more levels: c24-in128-out64, c24-in128-out64-r2, ...) is
judged on its requests pooled over its levels (every request sent in the window but the cancelled
ones, failures counted as analyzers.stats.slo.SloSample says: one that failed without a first token
is over every TTFT bound, one cut off mid-stream over the TPOT and E2E bounds), bound by bound (TTFT P99,
TPOT P95, and E2E P99 when that SLO is set), on how many requests were over the bound
(analyzers.stats.exceedance: an exact binomial test at 95%, widened by the design effect when the
requests over a bound came in bursts, as one stall makes them in closed loop; bootstrap intervals of a
P99 are shown, but cannot carry a verdict at small samples):

- `in`: every bound is established (e.g. none of 299 or more requests over the TTFT bound) and
  every level of the load met the SLO on its own;
- `out`: some bound is clearly broken, or a level of the load was not a valid measurement within
  the SLO for a reason no percentile shows: stopped over capacity, more than 5% errors, or every
  level of the load INVALID because the client fell behind (a level whose client fell behind is
  left out of the pool when the load has valid ones);
- `unclear`: otherwise (too close to a bound, repeats disagree, or `too_few` requests to establish
  it: none over, but fewer than the test needs).

How many failed is in each verdict (`failed`, `failed_no_token`) and in its reasons ("9 of 412 failed
(no first token)"); the percentiles shown (`ttft_p99_s`, ...) are the successful requests', as in the
level tables, with the failures beside them.

The answer is the highest load whose pooled point estimates meet the SLO below the lowest `out`
load; its interval runs from the highest `in` load at or below it (none: the low end is not
established) to the highest load below the lowest `out` that is not `out` itself. `bounded_by`
says what stopped the search going higher: the SLO, the client (a level marked INVALID because
the client fell behind), errors, or the search's limit.
"""

from __future__ import annotations

import numpy as np

from analyzers.stats.distribution import Distribution
from analyzers.stats.exceedance import check_bound, pooled_design_effect
from analyzers.stats.latency import LevelStats
from analyzers.stats.slo import MAX_VALID_ERROR_RATE, Slos, SloSample
from rundir import SweepInfo
from rundir.capacity import CapacityAnswer, LoadVerdict
from rundir.table import RequestTable

CLIENT_WORDS = "the client fell behind"
OVER_CAPACITY_WORDS = "over capacity"


def answer_in(sweep: SweepInfo) -> CapacityAnswer | None:
    """The capacity answer a run's sweep holds, if this run is a finished `llmbench capacity` (an
    answer of another version that does not read is none, rundir/capacity.py)."""
    return sweep.capacity.answer if sweep.capacity is not None else None


def judge_loads(
    table: RequestTable, loads: dict[float, list[str]], stats: dict[str, LevelStats], slos: Slos, seed: int = 0
) -> list[LoadVerdict]:
    """One verdict per load, from the pooled records of its levels (ordered by load)."""
    df = table.df
    level_col = df["level_id"].to_numpy()
    status = df["status"].to_numpy()
    win = df["in_window"].to_numpy()
    ok = win & (status == "ok")
    pooled = {load: _pooled_levels(table, loads[load], stats) for load in sorted(loads)}
    floors = _search_clustering([sample for _ids, sample in pooled.values()], slos)
    out = []
    for i, load in enumerate(sorted(loads)):
        ids, sample = pooled[load]
        rows = ok & np.isin(level_col, ids)
        rng = np.random.default_rng([seed, i])
        dists, checks, point = {}, [], True
        for name, column, _key, q, bound in _bounds(slos):
            dists[column] = Distribution.of(df[column].to_numpy()[rows], rng)  # shown: the successful ones
            values = sample.column(column)  # judged: failures counted
            known = ~np.isnan(values)
            if known.any() or column == "ttft_s":  # TTFT is always judged: none at all is `out`
                # with send times: widened by the clustering of the requests over the bound
                sent_at = None if sample.sent_at is None else sample.sent_at[known]
                checks.append(check_bound(name, values[known], q, bound, sent_at, floors.get(name, 1.0)))
            p = sample.percentile(column, q * 100)
            point = point and (p is None or p <= bound)
        ttft, tpot = dists["ttft_s"], dists["tpot_s"]
        point = point and ttft.n > 0
        invalid = _invalid_reasons([stats[lid] for lid in ids])
        levels_met = all(stats[lid].slo_met for lid in ids)
        clearly_out = ttft.n == 0 or any(c.verdict == "out" for c in checks)
        clearly_in = all(c.verdict == "in" for c in checks)
        verdict = "out" if clearly_out or invalid else "in" if clearly_in and levels_met else "unclear"
        good = [stats[lid].goodput_req_s for lid in ids]
        tok = [stats[lid].output_tok_s for lid in ids]
        failures = sample.failure_summary()
        out.append(
            LoadVerdict(
                load,
                ids,
                verdict,
                point and not invalid,
                sample.n,
                ttft.p["p99"],
                ttft.ci.get("p99"),
                tpot.p["p95"],
                tpot.ci.get("p95"),
                float(np.mean(good)) if good else 0.0,
                float(np.mean(tok)) if tok else 0.0,
                invalid + ([failures] if failures else []),
                over_bound={c.name: c.over for c in checks},
                design_effect={c.name: round(c.design_effect, 2) for c in checks},
                too_few=verdict == "unclear"
                and not invalid
                and levels_met
                and all(c.verdict == "in" or c.too_few for c in checks),
                failed=sample.failed,
                failed_no_token=sample.no_token,
            )
        )
    return out


def _pooled_levels(table: RequestTable, every: list[str], stats: dict[str, LevelStats]) -> tuple[list[str], SloSample]:
    """A load's levels and the sample of their requests sent in the window. A level whose client
    fell behind did not measure the server: pool the load's valid levels, and call the load INVALID
    (bounded by the client) only when none of its levels is valid."""
    df = table.df
    every = [lid for lid in every if lid in stats]
    ids = [lid for lid in every if not _client_behind(stats[lid])] or every
    sent = df["in_window"].to_numpy() & np.isin(df["level_id"].to_numpy(), ids)
    return ids, SloSample.of(
        df["status"].to_numpy()[sent],
        *(df[c].to_numpy()[sent] for c in ("ttft_s", "tpot_s", "e2e_s", "target_output_len", "t_sent")),
    )


def _search_clustering(samples: list[SloSample], slos: Slos) -> dict[str, float]:
    """Per bound, the design effect of the whole search's requests pooled (analyzers.stats.exceedance):
    a server that stalled at one load clusters its late requests at every load."""
    floors = {}
    for name, column, _key, _q, bound in _bounds(slos):
        flags = []
        for sample in samples:
            values = sample.column(column)
            known = ~np.isnan(values)
            if sample.sent_at is not None and known.any():
                order = np.argsort(sample.sent_at[known], kind="stable")
                flags.append((values[known] > bound)[order])
        floors[name] = pooled_design_effect(flags)
    return floors


def _bounds(slos: Slos) -> list[tuple[str, str, str, float, float]]:
    """(name, column, percentile key, quantile, bound) of each SLO bound that is set."""
    out = [("TTFT P99", "ttft_s", "p99", 0.99, slos.ttft_p99_s), ("TPOT P95", "tpot_s", "p95", 0.95, slos.tpot_p95_s)]
    if slos.e2e_p99_s is not None:
        out.append(("E2E P99", "e2e_s", "p99", 0.99, slos.e2e_p99_s))
    return out


def _client_behind(lv: LevelStats) -> bool:
    return any(CLIENT_WORDS in n for n in lv.notes)


def _invalid_reasons(levels: list[LevelStats]) -> list[str]:
    reasons = []
    for lv in levels:
        if any(CLIENT_WORDS in n for n in lv.notes):
            reasons.append(f"{lv.level_id}: INVALID, the client fell behind")
        if lv.error_rate > MAX_VALID_ERROR_RATE:
            reasons.append(f"{lv.level_id}: errors {lv.error_rate:.0%}")
        if any(n.startswith(OVER_CAPACITY_WORDS) for n in lv.notes):
            reasons.append(f"{lv.level_id}: over capacity, stopped early")
        if lv.slo_met is None and not _client_behind(lv):  # a client behind has no verdict either
            reasons.append(f"{lv.level_id}: no verdict (cut short)")
    return reasons


def capacity_answer(axis: str, verdicts: list[LoadVerdict], limit_reached: bool) -> CapacityAnswer:
    outs = [v.load for v in verdicts if v.verdict == "out"]
    lowest_out = min(outs) if outs else None
    below = [v for v in verdicts if lowest_out is None or v.load < lowest_out]
    met = [v for v in below if v.point_met]
    best = max(met, key=lambda v: v.load) if met else None
    bounded = _bounded_by(verdicts, lowest_out, limit_reached)
    if best is None:
        return CapacityAnswer(axis, None, None, None, lowest_out, bounded, None, None, verdicts)
    # The interval's low end: the highest load at or below the answer that is clearly in (none: not
    # established, so none is claimed; the lowest load measured would be a claim nothing supports).
    low = max((v.load for v in below if v.verdict == "in" and v.load <= best.load), default=None)
    high = max(v.load for v in below)
    return CapacityAnswer(
        axis, best.load, low, max(high, best.load), lowest_out, bounded, best.goodput_req_s, best.output_tok_s, verdicts
    )


def _bounded_by(verdicts: list[LoadVerdict], lowest_out: float | None, limit_reached: bool) -> str:
    if lowest_out is None:
        return "limit" if limit_reached else "none"
    first = next(v for v in verdicts if v.load == lowest_out)
    if any("client fell behind" in r for r in first.reasons):
        return "client"
    if any("errors" in r for r in first.reasons):
        return "errors"
    return "slo"
