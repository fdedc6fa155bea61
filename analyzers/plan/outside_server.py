"""What a level's requests spent outside the server before their first token, measured.

The simulator adds a request overhead to every TTFT (HTTP, tokenization, an event loop busy
streaming to the others, the client reading: docs/planning.md, "Fitting to a run"). The server's
own TTFT histogram (vLLM's and refengine's `vllm:time_to_first_token_seconds`) starts when the
server admits a request; the client's TTFT when it sent it. Over a level's measured requests the
difference of the two means is the time outside the server, and the server's running gauge says
under how much load it was paid. Where a run has both, the fit takes the overhead from them
rather than from the TTFT it would otherwise have to explain: a TTFT the simulation misses inside
the engine (a slow prefill, a queue it does not form) then stays a visible miss instead of being
hidden in the overhead.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.plan.request_overhead import RequestOverhead
from analyzers.probe_series import read_probe
from analyzers.triage.phases import level_phases, same_requests
from analyzers.triage.throughout import level_windows
from rundir import RunDir
from rundir.table import RequestTable


@dataclass(frozen=True)
class OutsideTime:
    level_id: str
    outside_s: float  # client mean TTFT - server mean TTFT (>= 0)
    running: float  # the server's mean running requests over the level's window
    n_client: int  # measured requests with a first token
    n_server: float  # first tokens the server's histogram counted over the level's span
    # The server's mean prefill phase (first scheduled to first token), where it publishes one: what
    # the fit holds the simulated prefill to (None: vLLM's prefill-time histogram not served)
    prefill_s: float | None = None
    prompt_tokens: float = 0.0  # the measured requests' mean prompt tokens (0: not known)

    def __post_init__(self) -> None:
        if min(self.outside_s, self.running, self.prompt_tokens, self.prefill_s or 0.0) < 0 or self.n_client < 1:
            raise ValueError(f"an outside time needs non-negative times and requests, got {self}")


def outside_the_server(run: RunDir) -> dict[str, OutsideTime]:
    """Level id -> its time outside the server, for the levels where the server's TTFT histogram
    counted about the requests the client measured (analyzers/triage/phases.same_requests); {} for
    a run without server histograms (a server with no /metrics, or none of vLLM's names)."""
    server = read_probe(run.probe_file("server"), "server")
    if server is None or "ttft_mean_s" not in server.numeric or "running" not in server.numeric:
        return {}
    table = RequestTable.load(run)
    df = table.df
    ok = df["in_window"].to_numpy(bool) & (df["status"] == "ok").to_numpy() & np.isfinite(df["ttft_s"].to_numpy(float))
    prompt_tokens = df["in_tokens"].to_numpy(float)
    out: dict[str, OutsideTime] = {}
    rows = table.level_rows()
    for level_id, window in level_windows(table, "ttft").items():
        measured = rows[level_id][ok[rows[level_id]]]
        if not measured.size:
            continue
        phases = level_phases(table, level_id, measured, window, server, None)
        t_server, n_server = phases.server.get("ttft_mean_s"), phases.server.get("ttft_count") or 0.0
        running = phases.server.get("running_mean")
        if t_server is None or running is None or not same_requests(n_server, phases.n):
            continue
        out[level_id] = OutsideTime(
            level_id,
            max(phases.ttft_mean_s - t_server, 0.0),
            max(running, 0.0),
            phases.n,
            n_server,
            phases.prefill_s,
            float(prompt_tokens[measured].mean()),
        )
    return out


# Prompt lengths closer than this (shortest / longest) say nothing about the per-token term.
DISTINCT_PROMPT_RATIO = 0.8
# Levels whose server ran fewer requests than this on average served one request at a time.
UNLOADED_RUNNING = 1.5


def request_overhead_of(times: list[OutsideTime], per_prompt_token_s: float = 0.0) -> RequestOverhead:
    """The request overhead r0 + r1 x running + r2 x prompt tokens that the simulator adds
    (analyzers/plan/request_overhead.py) through the measured outside times, every term >= 0.

    r2 from the unloaded levels (one request at a time) that ran prompts of clearly different
    lengths: their difference is the longer prompt's own work, with nothing else on the server. Fitted
    together with r1 over loaded levels instead, it traded against it (a longer prompt's level keeps
    more requests running: two draws of one 4-level sweep gave 10 and 0.7 us per token). Without such
    levels r2 stays `per_prompt_token_s` (the profile's, from calibration). Then r0 and r1 by least
    squares through what r2 leaves, each level weighted by its requests; one level, or levels at one
    load, give r1 = 0."""
    if not times:
        raise ValueError("no outside time to draw a request overhead from")
    unloaded = prompt_term_levels(times)
    if unloaded:
        x, y, w = _columns(unloaded, "prompt_tokens")
        per_prompt_token_s = max(_weighted_line(x, y, w)[1], 0.0)
    x, y, w = _columns(times, "running")
    r0, r1 = _fixed_and_per_running(x, y - per_prompt_token_s * np.array([t.prompt_tokens for t in times]), w)
    return RequestOverhead(r0, r1, per_prompt_token_s)


def prompt_term_levels(times: list[OutsideTime]) -> list[OutsideTime]:
    """The unloaded levels that measure the prompt term (prompts of clearly different lengths, one
    request at a time), or [] where the levels cannot."""
    unloaded = [t for t in times if t.running < UNLOADED_RUNNING and t.prompt_tokens > 0]
    if (
        unloaded
        and min(t.prompt_tokens for t in unloaded) / max(t.prompt_tokens for t in unloaded) <= DISTINCT_PROMPT_RATIO
    ):
        return unloaded
    return []


def _columns(times: list[OutsideTime], x_field: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, outside time, requests as weights) over the levels."""
    x = np.array([float(getattr(t, x_field)) for t in times])
    return x, np.array([t.outside_s for t in times]), np.array([float(t.n_client) for t in times])


def _weighted_line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line, weighted; x must vary."""
    xm, ym = float(np.average(x, weights=w)), float(np.average(y, weights=w))
    slope = float(np.sum(w * (x - xm) * (y - ym)) / np.sum(w * (x - xm) ** 2))
    return ym - slope * xm, slope


def _fixed_and_per_running(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """r0 + r1 x running through (x, y), both >= 0: the best of the mean alone, the line and the line
    through the origin (levels at one load give the mean), or nothing where none is feasible."""
    candidates = [(float(np.average(y, weights=w)), 0.0)]
    if np.ptp(x) > 0:
        candidates.append(_weighted_line(x, y, w))
        candidates.append((0.0, float(np.sum(w * x * y) / np.sum(w * x * x))))
    feasible = [(a, b) for a, b in candidates if a >= 0 and b >= 0] + [(0.0, 0.0)]
    return min(feasible, key=lambda ab: float(np.sum(w * (ab[0] + ab[1] * x - y) ** 2)))
