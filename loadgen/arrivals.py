"""Open-loop arrival plans: when each request should be sent, independent of when others finish.

Gaps are gamma distributed with shape = burstiness and mean 1/rate (vLLM's benchmark_serving
convention): burstiness 1 is a Poisson process, < 1 is burstier, > 1 more regular. With N
workers each runs its own plan at rate/N; N independent Poisson processes add up to one Poisson
process at the full rate exactly (for burstiness != 1 the sum is only approximately gamma).
"""

from __future__ import annotations

import random
from typing import Iterator


class ArrivalPlan:
    def __init__(self, rate: float, burstiness: float = 1.0, seed: int = 0, stream: int = 0):
        if not rate > 0 or not burstiness > 0:
            raise ValueError(f"rate and burstiness must be > 0, got {rate}, {burstiness}")
        self.rate, self.burstiness = rate, burstiness
        self._rng = random.Random(f"arrivals/{seed}/{stream}")

    def gap(self) -> float:
        return self._rng.gammavariate(self.burstiness, 1.0 / (self.rate * self.burstiness))

    def times(self, t_start: float) -> Iterator[float]:
        """Planned absolute send times after t_start (the first one a gap after it, not at it)."""
        t = t_start
        while True:
            t += self.gap()
            yield t
