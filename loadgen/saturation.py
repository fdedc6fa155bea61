"""Over-saturation: an open-loop level whose queue keeps growing can only fail, so stop it early.

Closed loop cannot run away (at most `concurrency` requests are ever in the system), so the rule
is for open loop only. Arrivals beyond the server's capacity queue up, and each request waits
longer than the one sent before it: TTFT rises steadily with send time. The rule, checked on the
records as they arrive in the parent process (loadgen.level), over every finished request of the
level so far (warm-up included: a runaway queue starts with the load):

- at least MIN_SAMPLES successful requests spanning MIN_SPAN_S seconds of send time;
- the median TTFT of the last third (by send time) is RATIO times that of the first third;
- the least-squares slope of TTFT against send time is positive with a t-statistic above
  MIN_T (a steady rise, not one spike);
- the last third's median is already past the level's TTFT bound (the SLO): a level that is
  merely slowing down but still within the SLO is measured to its end.

The client's own in-flight count is a second witness, and an earlier one (a record arrives only
when its request ends, so TTFT evidence lags the queue by the queue's own wait): when the
requests in flight (the progress messages, every 0.5 s) at least doubled with a significant
rise over QUEUE_MIN_SPAN_S, FAST_SAMPLES records spanning FAST_SPAN_S suffice for the TTFT test.
A healthy level whose in-flight count ramps up for a while (long outputs) does not trip it:
its TTFT does not rise past the bound.

A third witness needs no finished request at all (a queue so deep that nothing finishes within
the level, or a request timeout, would otherwise keep the level running to its end): the workers
count the requests in flight that have waited LATE_FACTOR times the bound with no first token
yet, once some request of the level had its first token within the bound. When the in-flight
count grows as above and at least LATE_SAMPLES requests are that late, TTFT has risen from within
the bound to past twice it: the level is over capacity. (A level whose TTFT is long from its first
request, a slow prefill, never counts late requests, and one whose TTFT sits a little above the
bound is kept out by LATE_FACTOR: both miss the SLO, measured to their end, but do not run away.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rundir import RequestRecord

MIN_SAMPLES = 24
MIN_SPAN_S = 2.0
RATIO = 2.0
MIN_T = 4.0
CHECK_EVERY = 4  # re-evaluate after this many new samples (the fit is O(n))
FAST_SAMPLES = 9  # with the in-flight count growing too
FAST_SPAN_S = 0.5
QUEUE_MIN_SPAN_S = 2.0
LATE_FACTOR = 2.0  # no first token after this many times the bound: late
LATE_SAMPLES = 3


@dataclass
class SaturationRule:
    ttft_bound_s: float
    min_samples: int = MIN_SAMPLES
    min_span_s: float = MIN_SPAN_S
    ratio: float = RATIO
    min_t: float = MIN_T
    sent: list[float] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)
    in_flight: list[tuple[float, int]] = field(default_factory=list)
    late: int = 0  # the latest count of late requests in flight (see above)
    _since_check: int = 0
    _verdict: str | None = None

    def add(self, rec: RequestRecord) -> None:
        if rec.status == "ok" and rec.ttft_s is not None:
            self.sent.append(rec.t_sent)
            self.ttft.append(rec.ttft_s)
            self._since_check += 1

    def add_in_flight(self, t: float, n: int, late: int = 0) -> None:
        self.in_flight.append((t, n))
        self.late = late
        if self._verdict is None and late >= LATE_SAMPLES:
            self._verdict = late_verdict(self)

    def reason(self) -> str | None:
        """Why the level is over capacity, or None (yet)."""
        if self._verdict is not None or self._since_check < CHECK_EVERY:
            return self._verdict
        self._since_check = 0
        self._verdict = verdict(np.asarray(self.sent), np.asarray(self.ttft), self)
        return self._verdict


def late_verdict(rule: SaturationRule) -> str | None:
    queue = _queue_growth(rule.in_flight)
    if queue is None or rule.late < LATE_SAMPLES:
        return None
    return (
        f"{rule.late} requests in flight had waited over {LATE_FACTOR * rule.ttft_bound_s * 1000:g} ms "
        f"({LATE_FACTOR:g}x the {rule.ttft_bound_s * 1000:g} ms bound) with no first token; "
        f"requests in flight {queue}"
    )


def verdict(sent: np.ndarray, ttft: np.ndarray, rule: SaturationRule) -> str | None:
    queue = _queue_growth(rule.in_flight)
    need, span = (FAST_SAMPLES, FAST_SPAN_S) if queue else (rule.min_samples, rule.min_span_s)
    if sent.size < need or sent.max() - sent.min() < span:
        return None
    order = np.argsort(sent)
    t, y = sent[order] - sent.min(), ttft[order]
    third = max(1, y.size // 3)
    first, last = float(np.median(y[:third])), float(np.median(y[-third:]))
    if last < rule.ratio * max(first, 1e-6) or last <= rule.ttft_bound_s:
        return None
    slope, t_stat = _slope(t, y)
    if slope <= 0 or t_stat < rule.min_t:
        return None
    words = (
        f"TTFT rose from {first * 1000:.0f} ms (median of the first third) to {last * 1000:.0f} ms "
        f"(last third) over {t[-1]:.1f} s of sends, +{slope * 1000:.0f} ms per second (t = {t_stat:.0f}), "
        f"past the {rule.ttft_bound_s * 1000:g} ms bound"
    )
    return words + (f"; requests in flight {queue}" if queue else "")


def _slope(t: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares slope of y on t and its t-statistic."""
    tc = t - t.mean()
    sxx = float((tc * tc).sum())
    if sxx <= 0:
        return 0.0, 0.0
    slope = float((tc * (y - y.mean())).sum()) / sxx
    resid = y - y.mean() - slope * tc
    dof = max(1, y.size - 2)
    se = float(np.sqrt((resid * resid).sum() / dof / sxx))
    return slope, (slope / se if se > 0 else float("inf"))


def _queue_growth(samples: list[tuple[float, int]]) -> str | None:
    """'grew from a to b' when the in-flight count at least doubled, rising steadily, over
    QUEUE_MIN_SPAN_S or more; else None."""
    if len(samples) < 6 or samples[-1][0] - samples[0][0] < QUEUE_MIN_SPAN_S:
        return None
    t = np.array([x for x, _ in samples]) - samples[0][0]
    n = np.array([c for _, c in samples], dtype=float)
    third = len(n) // 3
    a, b = float(np.median(n[:third])), float(np.median(n[-third:]))
    slope, t_stat = _slope(t, n)
    return f"grew from {a:.0f} to {b:.0f}" if b >= 2 * max(a, 1.0) and slope > 0 and t_stat >= MIN_T else None
