"""`bench/diagnosis_family.py --family pause`: the whole server stopped (SIGSTOP) a few times inside
the level, beside draws that must not be called a pause (clean levels, a CPU neighbour). The
stopping itself is bench/diagnosis_faults.py's ServerPauses."""

from __future__ import annotations

import random

PAUSE_EXPECTED = {"server-pause": ["p99.host.pause"]}
PAUSE_MIX = {"server-pause": 10, "clean": 3, "cpu-neighbour": 3}


def make_pause_draw(rng: random.Random, index: int, base: list[str], warmup_s: float, duration_s: float, draw_type):
    """The server stopped 3-6 times for 0.12-0.5 s, at least 1 s apart, after the warm-up; under load
    (a pause holds the first tokens of the requests waiting through it, and one user alone spends
    most of its time decoding, where a pause is a TPOT matter)."""
    load = (
        ["--request-rate", str(rng.choice([8, 12, 16]))]
        if rng.random() < 0.4
        else ["--concurrency", str(rng.choice([4, 6, 8]))]
    )
    onsets: list[float] = []
    for _ in range(rng.choice([3, 4, 5, 6])):
        for _try in range(50):
            t = rng.uniform(warmup_s + 0.5, warmup_s + duration_s - 1.0)
            if all(abs(t - o) >= 1.0 for o in onsets):
                onsets.append(t)
                break
    windows = [(round(t, 2), round(t + rng.uniform(0.12, 0.5), 2)) for t in sorted(onsets)]
    params = {"load": load, "windows": windows}
    return draw_type(index, "server-pause", params, [*base, *load], PAUSE_EXPECTED["server-pause"])
