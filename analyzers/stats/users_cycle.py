"""Does a closed loop's window rate stand for its users' rate? (docs/metrics.md, "Throughput")

A closed loop of N users, each sending its next request when its last one ends, serves N / (mean
request time) requests a second once it is steady (Little's law), wherever the window falls. The
window's own rate counts what arrived inside the window. The two agree on a level whose users are
spread over their cycle. When the users move in phase (prefilled in the same steps, they finish in
the same step and come back together: a convoy), their tokens arrive in bursts a cycle apart, and a
window that holds a few cycles counts a burst more or fewer by where it starts (64 users of short
prompts on one CPU core cycle every few seconds: a 20-s window holds three of them). The note says
how far apart the two are and how long a window would bring the gap under 5%.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CYCLE_GAP = 0.08  # the window's rate this far from the users' cycle rate (either way) is a note
SETTLED_GAP = 0.05  # the gap a suggested window aims for (a gap shrinks as the cycles it holds grow)


@dataclass(frozen=True)
class UsersCycle:
    users: int
    cycle_s: float  # the mean request time (E2E) of the window's successful requests
    out_tokens: float  # their mean output tokens
    window_s: float
    window_tok_s: float  # the window's own output rate (analyzers/stats/throughput.py)

    def __post_init__(self) -> None:
        if self.users < 1 or self.cycle_s <= 0 or self.window_s <= 0:
            raise ValueError(f"a closed loop needs users, a cycle and a window: {self}")

    @property
    def cycle_tok_s(self) -> float:
        """Little's law: N users, each with one request of `cycle_s` in flight at all times."""
        return self.users * self.out_tokens / self.cycle_s

    @property
    def gap(self) -> float:
        return self.window_tok_s / self.cycle_tok_s - 1.0

    @property
    def cycles_in_window(self) -> float:
        return self.window_s / self.cycle_s

    def settling_window_s(self) -> float:
        """A window long enough for the gap to fall under SETTLED_GAP, the gap shrinking as 1 / cycles."""
        return self.window_s * abs(self.gap) / SETTLED_GAP

    def words(self) -> str:
        return (
            f"the window's rate ({self.window_tok_s:.1f} tok/s) is {self.gap:+.0%} from its {self.users} "
            f"users' own ({self.users} x {self.out_tokens:.0f} tokens / E2E mean {self.cycle_s:.2f} s = "
            f"{self.cycle_tok_s:.1f} tok/s): the users move in phase, and the {self.window_s:.0f}-s window "
            f"holds {self.cycles_in_window:.1f} of their cycles, so its rate depends on where it cut them "
            f"(a --duration of {self.settling_window_s():.0f} s or more settles it)"
        )


def users_cycle(
    concurrency: int | None,
    e2e_ok: np.ndarray,
    out_tokens_ok: np.ndarray,
    n_failed: int,
    window_s: float,
    window_tok_s: float,
) -> UsersCycle | None:
    """The check of a closed-loop level's window rate, or None where Little's law does not hold the
    rate: an open loop (no fixed users), failures in the window (a failed request's cycle is not a
    served one), fewer requests than users (not every user's cycle seen), or a window shorter than a
    request (summarize.py says that one)."""
    if concurrency is None or concurrency < 1 or n_failed:
        return None
    fine = np.isfinite(e2e_ok) & np.isfinite(out_tokens_ok)
    e2e, out = e2e_ok[fine].astype(float), out_tokens_ok[fine].astype(float)
    if e2e.size < concurrency or not (e2e > 0).all():
        return None
    cycle = float(e2e.mean())
    if window_s < cycle:
        return None
    return UsersCycle(int(concurrency), cycle, float(out.mean()), float(window_s), float(window_tok_s))


def cycle_notes(check: UsersCycle | None) -> list[str]:
    """The note of a level whose window rate is more than CYCLE_GAP from its users' own (or none)."""
    if check is None or abs(check.gap) <= CYCLE_GAP:
        return []
    return [check.words()]
