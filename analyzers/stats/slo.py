"""Service-level objectives: the verdict per level and which requests count toward goodput.

A level meets the SLO when its TTFT P99, TPOT P95 (and E2E P99 when set) are within their
bounds. Goodput counts the requests that individually met every bound: a request with one
output token has no TPOT and is judged on the rest. A level where requests were sent but none
succeeded has missed the SLO (it served nobody); a level with nothing measured has no verdict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from analyzers.stats.distribution import Distribution
from rundir import SloSpec

# A level where more than this share of its requests failed is not a measurement of the server
# serving its load: it never meets the SLO, so it is never the highest load within it.
MAX_VALID_ERROR_RATE = 0.05


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

    def request_meets(self, ttft: np.ndarray, tpot: np.ndarray, e2e: np.ndarray) -> np.ndarray:
        """Per successful request: did it meet every bound? NaN TPOT (one-token output) passes."""
        ok = ~np.isnan(ttft) & (ttft <= self.ttft_p99_s)
        ok &= np.isnan(tpot) | (tpot <= self.tpot_p95_s)
        if self.e2e_p99_s is not None:
            ok &= ~np.isnan(e2e) & (e2e <= self.e2e_p99_s)
        return ok

    def level_verdict(self, n_in_window: int, ttft: Distribution, tpot: Distribution,
                      e2e: Distribution, error_rate: float = 0.0) -> tuple[bool | None, list[str]]:
        """(met?, the bounds it broke in words). None: nothing was measured."""
        if n_in_window == 0:
            return None, []
        if ttft.n == 0:
            return False, ["no successful requests"]
        broke = []
        if error_rate > MAX_VALID_ERROR_RATE:
            broke.append(f"errors {error_rate:.0%} > {MAX_VALID_ERROR_RATE:.0%}: not a valid measurement")
        if ttft.p["p99"] > self.ttft_p99_s:
            broke.append(f"TTFT P99 {ttft.p['p99'] * 1000:.0f} ms > {self.ttft_p99_s * 1000:g} ms")
        if tpot.n and tpot.p["p95"] > self.tpot_p95_s:
            broke.append(f"TPOT P95 {tpot.p['p95'] * 1000:.1f} ms > {self.tpot_p95_s * 1000:g} ms")
        if self.e2e_p99_s is not None and e2e.n and e2e.p["p99"] > self.e2e_p99_s:
            broke.append(f"E2E P99 {e2e.p['p99']:.2f} s > {self.e2e_p99_s:g} s")
        return not broke, broke
