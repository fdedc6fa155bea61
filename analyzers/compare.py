"""A/B comparison of runs: the same levels side by side, deltas with bootstrap intervals, a verdict.

For each level both runs share and each metric, the bootstrap draws of run A and of run B
(independent resamples, see analyzers.stats.distribution) give draws of the delta B − A; its 95%
interval is their 2.5–97.5 percentiles. The verdict:

- `within noise` when the interval contains 0, or the change is smaller than `min_effect`
  (default 2%) of A's value: a real but negligible change is not worth a decision;
- otherwise `better` or `worse` by the metric's direction (latency and error rate: lower is
  better; throughput and goodput: higher is better).

Latency percentiles compare on the SLO verdict's basis (analyzers.stats.slo.SloSample): every
request sent in the window but the cancelled ones, a failed request as one that never got there
(+inf TTFT without a first token, +inf TPOT cut off mid-stream, +inf E2E either way), so a run whose
tail "improved" because its slow requests failed instead is not called better. A percentile that
reaches the failures is unbounded (+inf): against a bounded one it is `worse` (no size of the change,
no interval: `note` says why); both unbounded is `n/a`.

Levels are matched by level id (load × input length × output length); levels only one run has
are listed as skipped. Request classes of a mixed workload (`<level>/in<len>`, see
analyzers.stats.request_classes) are compared too, after their level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from analyzers.stats.distribution import BOOTSTRAP_RESAMPLES, interval, percentile_draws
from analyzers.stats.request_classes import all_class_rows
from analyzers.stats.slo import SloSample, tail_percentile_draws
from analyzers.stats.throughput import level_rates
from analyzers.summary import RunSummary
from rundir.table import RequestTable

MIN_EFFECT = 0.02
# (metric name, column, percentile): latency metrics, where lower is better
LATENCY_METRICS: list[tuple[str, str, float]] = [
    ("TTFT P50", "ttft_s", 50),
    ("TTFT P95", "ttft_s", 95),
    ("TTFT P99", "ttft_s", 99),
    ("TPOT P50", "tpot_s", 50),
    ("TPOT P95", "tpot_s", 95),
    ("TPOT P99", "tpot_s", 99),
    ("E2E P50", "e2e_s", 50),
    ("E2E P99", "e2e_s", 99),
]
RATE_METRICS = ["output tok/s", "requests/s", "goodput req/s", "error rate"]
HIGHER_IS_BETTER = {"output tok/s", "requests/s", "goodput req/s"}


@dataclass
class MetricDelta:
    metric: str
    a: float | None
    b: float | None
    delta: float | None  # b − a
    rel: float | None  # delta / a
    ci: list[float] | None  # 95% interval of the delta
    verdict: str  # better | worse | within noise | n/a
    note: str = ""  # why a verdict has no size: a percentile reached the failed requests


@dataclass
class LevelComparison:
    level_id: str
    deltas: list[MetricDelta]


@dataclass
class Comparison:
    run_a: str
    run_b: str
    levels: list[LevelComparison]
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = {"better": 0, "worse": 0, "within noise": 0, "n/a": 0}
        for lc in self.levels:
            for d in lc.deltas:
                out[d.verdict] += 1
        return out


def compare_runs(
    a: tuple[RunSummary, RequestTable],
    b: tuple[RunSummary, RequestTable],
    min_effect: float = MIN_EFFECT,
    seed: int = 0,
) -> Comparison:
    (sa, ta), (sb, tb) = a, b
    ids_a = [lv.level_id for lv in sa.levels]
    ids_b = [lv.level_id for lv in sb.levels]
    shared = [i for i in ids_a if i in ids_b]
    rng_a, rng_b = np.random.default_rng([seed, 1]), np.random.default_rng([seed, 2])
    rows_a, rows_b = ta.level_rows(), tb.level_rows()
    levels = []
    # Request classes of mixed workloads compare like levels, right after their level.
    classes_a, classes_b = all_class_rows(ta), all_class_rows(tb)
    rows_a.update({cid: r for cid, (_, r) in classes_a.items()})
    rows_b.update({cid: r for cid, (_, r) in classes_b.items()})
    order = []
    for level_id in shared:
        order.append(level_id)
        order += [cid for cid, (lv, _) in classes_a.items() if lv == level_id and cid in classes_b]
    for level_id in order:
        da = _draws(ta, rows_a[level_id], sa, level_id, rng_a)
        db = _draws(tb, rows_b[level_id], sb, level_id, rng_b)
        levels.append(LevelComparison(level_id, [_delta(m, da[m], db[m], min_effect) for m in da]))
    return Comparison(
        sa.info.run_id,
        sb.info.run_id,
        levels,
        only_a=[i for i in ids_a if i not in shared],
        only_b=[i for i in ids_b if i not in shared],
    )


def _draws(
    table: RequestTable, rows: np.ndarray, s: RunSummary, level_id: str, rng: np.random.Generator
) -> dict[str, tuple[float | None, np.ndarray]]:
    """metric -> (point estimate, bootstrap draws) for one level of one run."""
    df = table.df
    win = df["in_window"].to_numpy()[rows]
    status = df["status"].to_numpy()[rows]
    sample = SloSample.of(
        status[win], *(df[c].to_numpy()[rows][win] for c in ("ttft_s", "tpot_s", "e2e_s", "target_output_len"))
    )
    out: dict[str, tuple[float | None, np.ndarray]] = {}
    by_col: dict[str, list[tuple[str, float]]] = {}
    for name, col, q in LATENCY_METRICS:
        by_col.setdefault(col, []).append((name, q))
    for col, metrics in by_col.items():
        values = sample.column(col)
        qs = [q for _, q in metrics]
        draws = tail_percentile_draws(values, qs, lambda v, q: percentile_draws(v, q, rng))
        for i, (name, q) in enumerate(metrics):
            out[name] = (sample.percentile(col, q), draws[:, i])
    rates = level_rates(table, rows, s.windows[level_id], s.slos, rng)
    lv = next(x for x in s.levels + s.classes if x.level_id == level_id)
    for name, value in (
        ("output tok/s", lv.output_tok_s),
        ("requests/s", lv.req_s),
        ("goodput req/s", lv.goodput_req_s),
    ):
        out[name] = (value, rates.draws.get(name, np.zeros(BOOTSTRAP_RESAMPLES)))
    n = int(win.sum())
    rate = lv.error_rate
    out["error rate"] = (rate, rng.binomial(n, rate, BOOTSTRAP_RESAMPLES) / n if n else np.full(1, np.nan))
    return out


def _delta(
    metric: str, a: tuple[float | None, np.ndarray], b: tuple[float | None, np.ndarray], min_effect: float
) -> MetricDelta:
    (va, da), (vb, db) = a, b
    if va is None or vb is None or np.isnan(da).all() or np.isnan(db).all():
        return MetricDelta(metric, va, vb, None, None, None, "n/a")
    if math.isinf(va) or math.isinf(vb):  # a latency percentile that reached the failed requests
        if math.isinf(va) and math.isinf(vb):
            return MetricDelta(
                metric, va, vb, None, None, None, "n/a", f"both runs' {metric} reaches their failed requests: unbounded"
            )
        which = "B" if math.isinf(vb) else "A"
        return MetricDelta(
            metric,
            va,
            vb,
            None,
            None,
            None,
            "worse" if which == "B" else "better",
            f"{which}'s {metric} reaches its failed requests: unbounded",
        )
    k = min(da.size, db.size)
    with np.errstate(invalid="ignore"):  # inf - inf draws (both reached failures) are nan: dropped
        ci = _interval(db[:k] - da[:k])
    delta = vb - va
    rel = delta / va if va else None
    small = abs(delta) <= min_effect * abs(va) if va else delta == 0
    if ci is None or ci[0] <= 0 <= ci[1] or small:
        verdict = "within noise"
    else:
        up = delta > 0
        verdict = "better" if up == (metric in HIGHER_IS_BETTER) else "worse"
    return MetricDelta(metric, va, vb, delta, rel, ci, verdict)


def _interval(deltas: np.ndarray) -> list[float] | None:
    """The interval of delta draws, some of which may be ±inf (a resample that reached failures)."""
    d = deltas[~np.isnan(deltas)]
    finite = d[np.isfinite(d)]
    if finite.size == d.size:
        return interval(d)
    ci = interval(np.clip(d, -1e300, 1e300))
    lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 0.0)
    # interpolated between finite draws it stays within them; beyond, it was interpolated towards an inf
    return None if ci is None else [-math.inf if x < lo else math.inf if x > hi else x for x in ci]
