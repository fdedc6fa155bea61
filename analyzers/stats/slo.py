"""Service-level objectives: the verdict per level and which requests count toward goodput.

A level meets the SLO when its TTFT P99, TPOT P95 (and E2E P99 when set) are within their
bounds. The percentiles a verdict uses count every request sent in the measured window but the
cancelled ones (the client stopped them), and a failed request as one that never got there
(`SloSample`, docs/metrics.md "Failed requests and the SLO"): failed before its first token, its
TTFT is +inf; cut off after it, its TPOT is +inf; failed either way, its E2E is +inf. Goodput
counts the successful requests that individually met every bound: a request with one output
token has no TPOT and is judged on the rest. A level where requests were sent but none succeeded
has missed the SLO (it served nobody); a level with nothing measured has no verdict.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from rundir import SloSpec

# A level where more than this share of its requests failed is not a measurement of the server
# serving its load: it never meets the SLO, so it is never the highest load within it.
MAX_VALID_ERROR_RATE = 0.05
FAILED = ("error", "timeout")  # failures of the server; `cancelled` (the client stopped it) is not one
COUNTED = ("ok", *FAILED)  # what an SLO verdict counts
# (name, column, quantile as a percent) of each bound; E2E only when its SLO is set
_BOUNDS = (("TTFT P99", "ttft_s", 99.0), ("TPOT P95", "tpot_s", 95.0), ("E2E P99", "e2e_s", 99.0))


def tail_percentile(values: np.ndarray, q: float) -> float | None:
    """numpy's linear q-th percentile of `values` (NaN dropped), where +inf stands for a request that
    never got there: +inf when the percentile's rank reaches one of them. None: no values."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return None
    finite = np.isfinite(v)
    if finite.all():
        return float(np.percentile(v, q))
    return float(_unbounded(np.percentile(np.where(finite, v, _SENTINEL), q), v[finite]))


def tail_percentile_draws(values: np.ndarray, qs, draw) -> np.ndarray:
    """`draw(values, qs)` (a bootstrap of percentiles, e.g. distribution.percentile_draws) of values
    holding +inf, with +inf wherever a resample's percentile reaches one of them."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    finite = np.isfinite(v)
    if finite.all():
        return draw(v, qs)
    return _unbounded(draw(np.where(finite, v, _SENTINEL), qs), v[finite])


_SENTINEL = 1e300  # +inf for numpy's interpolation, which turns inf − inf into NaN


def _unbounded(x, finite: np.ndarray):
    """An interpolated value above every finite one was interpolated towards the sentinel: +inf."""
    top = finite.max() if finite.size else -math.inf
    return np.where(np.asarray(x) > top, math.inf, x)


@dataclass(frozen=True)
class SloSample:
    """What an SLO verdict counts: every request sent in the measured window but the cancelled ones,
    with each failed request's values as a request that never got there (docs/metrics.md):

    - failed before its first token (`no_token`): TTFT +inf (its TTFT is at least its time to failure,
      and it never got one); no TPOT (it decoded nothing: the TTFT bound judges it); E2E +inf;
    - cut off after its first token (`mid_stream`): its TTFT as measured; TPOT +inf (the tokens it was
      owed never came: (E2E − TTFT) / (n − 1) with E2E unbounded), unless it asked for one token; E2E +inf.
    """

    ttft: np.ndarray
    tpot: np.ndarray
    e2e: np.ndarray
    failed_at: np.ndarray  # a failed request's time to failure (NaN: not failed, or not known)
    n_ok: int
    no_token: int
    mid_stream: int
    sent_at: np.ndarray | None = None  # each request's send time (epoch s), when the caller knows it

    @classmethod
    def of(
        cls,
        status: np.ndarray,
        ttft_s: np.ndarray,
        tpot_s: np.ndarray,
        e2e_s: np.ndarray,
        target_output_len: np.ndarray | None = None,
        t_sent: np.ndarray | None = None,
    ) -> "SloSample":
        """From the columns of the requests sent in the window (any status: the cancelled are left out)."""
        status = np.asarray(status)
        keep = np.isin(status, COUNTED)
        status, ttft_s, tpot_s, e2e_s = (
            status[keep],
            *(np.asarray(c, dtype=float)[keep] for c in (ttft_s, tpot_s, e2e_s)),
        )
        asked = (
            np.full(status.size, np.nan)
            if target_output_len is None
            else np.asarray(target_output_len, dtype=float)[keep]
        )
        failed = np.isin(status, FAILED)
        no_token = failed & np.isnan(ttft_s)
        mid = failed & ~no_token
        ttft = np.where(no_token, math.inf, ttft_s)
        tpot = np.where(status == "ok", tpot_s, np.nan)
        tpot = np.where(mid & ~(asked == 1), math.inf, tpot)
        e2e = np.where(failed, math.inf, e2e_s)
        return cls(
            ttft,
            tpot,
            e2e,
            np.where(failed, e2e_s, np.nan),
            int((status == "ok").sum()),
            int(no_token.sum()),
            int(mid.sum()),
            None if t_sent is None else np.asarray(t_sent, dtype=float)[keep],
        )

    @property
    def n(self) -> int:
        return int(self.ttft.size)

    @property
    def failed(self) -> int:
        return self.no_token + self.mid_stream

    def column(self, name: str) -> np.ndarray:
        """The values of `ttft_s`, `tpot_s` or `e2e_s` the verdict counts (+inf: failed; NaN: none)."""
        return {"ttft_s": self.ttft, "tpot_s": self.tpot, "e2e_s": self.e2e}[name]

    def failures_in(self, name: str) -> int:
        """How many failed requests stand in `name`'s values as +inf."""
        return int(np.isinf(self.column(name)).sum())

    def percentile(self, name: str, q: float) -> float | None:
        return tail_percentile(self.column(name), q)

    def lower_bound(self, name: str, q: float) -> float | None:
        """What an unbounded percentile is at least: the same percentile with each failed request at
        its time to failure (a TTFT or E2E it had not reached yet); None for TPOT (no such time)."""
        if name == "tpot_s":
            return None
        v = self.column(name)
        return tail_percentile(np.where(np.isinf(v), np.nan_to_num(self.failed_at, nan=0.0), v), q)

    def failure_words(self, name: str) -> str:
        """'the 23 requests that failed without a first token' (those the values of `name` count as +inf)."""
        k = self.failures_in(name)
        what = {"ttft_s": "that failed without a first token", "tpot_s": "cut off mid-stream", "e2e_s": "that failed"}[
            name
        ]
        return f"the {k} request{'s' if k != 1 else ''} {what}"

    def failure_summary(self) -> str:
        return failure_summary(self.n, self.no_token, self.mid_stream)


def failure_summary(n: int, no_token: int, mid_stream: int) -> str:
    """'9 of 412 failed (no first token)', '12 of 412 failed (9 no first token, 3 cut off mid-stream)';
    '' when none failed."""
    if not no_token + mid_stream:
        return ""
    kinds = [(k, what) for k, what in ((no_token, "no first token"), (mid_stream, "cut off mid-stream")) if k]
    how = kinds[0][1] if len(kinds) == 1 else ", ".join(f"{k} {what}" for k, what in kinds)
    return f"{no_token + mid_stream} of {n} failed ({how})"


def _duration(seconds: float, name: str) -> str:
    if seconds >= 1:
        return f"{seconds:.3g} s"
    return f"{seconds * 1000:.1f} ms" if name == "tpot_s" else f"{seconds * 1000:.0f} ms"


@dataclass(frozen=True)
class Slos(SloSpec):
    """The contract's SLO bounds (rundir.SloSpec, where the defaults live) with their verdicts."""

    @classmethod
    def of(cls, d: "dict | SloSpec | None") -> "Slos":
        if isinstance(d, Slos):
            return d
        if isinstance(d, SloSpec):
            d = asdict(d)
        d = d or {}
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__ and v is not None})

    def describe(self) -> str:
        parts = [f"TTFT P99 ≤ {self.ttft_p99_s * 1000:g} ms", f"TPOT P95 ≤ {self.tpot_p95_s * 1000:g} ms"]
        if self.e2e_p99_s is not None:
            parts.append(f"E2E P99 ≤ {self.e2e_p99_s:g} s")
        return ", ".join(parts)

    def bounds(self) -> list[tuple[str, str, float, float]]:
        """(name, column, quantile as a percent, bound) of each bound that is set."""
        limit = {"ttft_s": self.ttft_p99_s, "tpot_s": self.tpot_p95_s, "e2e_s": self.e2e_p99_s}
        return [(name, col, q, bound) for name, col, q in _BOUNDS if (bound := limit[col]) is not None]

    def request_meets(self, ttft: np.ndarray, tpot: np.ndarray, e2e: np.ndarray) -> np.ndarray:
        """Per successful request: did it meet every bound? NaN TPOT (one-token output) passes."""
        ok = ~np.isnan(ttft) & (ttft <= self.ttft_p99_s)
        ok &= np.isnan(tpot) | (tpot <= self.tpot_p95_s)
        if self.e2e_p99_s is not None:
            ok &= ~np.isnan(e2e) & (e2e <= self.e2e_p99_s)
        return ok

    def level_verdict(
        self, n_in_window: int, sample: SloSample, error_rate: float = 0.0
    ) -> tuple[bool | None, list[str]]:
        """(met?, the bounds it broke in words) on `sample` (the requests sent in the window, failures
        counted, SloSample). None: nothing was measured."""
        if n_in_window == 0:
            return None, []
        if sample.n_ok == 0:
            return False, ["no successful requests"]
        broke = []
        if error_rate > MAX_VALID_ERROR_RATE:
            broke.append(f"errors {error_rate:.0%} > {MAX_VALID_ERROR_RATE:.0%}: not a valid measurement")
        for name, col, q, bound in self.bounds():
            value = sample.percentile(col, q)
            if value is not None and value > bound:
                broke.append(self.broken_words(name, col, q, bound, sample))
        return not broke, broke

    @staticmethod
    def broken_words(name: str, col: str, q: float, bound: float, sample: SloSample) -> str:
        """'TTFT P99 250 ms > 100 ms'; with failures counted, 'TTFT P99 > 3 s counting the 23 requests
        that failed without a first token (bound 100 ms)' (findings read both forms)."""
        value = sample.percentile(col, q)
        assert value is not None
        if not sample.failures_in(col):
            fmt = {
                "ttft_s": f"{value * 1000:.0f} ms > {bound * 1000:g} ms",
                "tpot_s": f"{value * 1000:.1f} ms > {bound * 1000:g} ms",
                "e2e_s": f"{value:.2f} s > {bound:g} s",
            }
            return f"{name} {fmt[col]}"
        limit = f"{bound * 1000:g} ms" if col != "e2e_s" else f"{bound:g} s"
        if math.isinf(value):
            at_least = max(sample.lower_bound(col, q) or 0.0, bound)
            shown = f"> {_duration(at_least, col)}"
        else:
            shown = _duration(value, col)
        return f"{name} {shown} counting {sample.failure_words(col)} (bound {limit})"
