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

    def __post_init__(self) -> None:
        if self.outside_s < 0 or self.running < 0 or self.n_client < 1 or (self.prefill_s or 0.0) < 0:
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
            level_id, max(phases.ttft_mean_s - t_server, 0.0), max(running, 0.0), phases.n, n_server, phases.prefill_s
        )
    return out


def request_overhead_of(times: list[OutsideTime]) -> tuple[float, float]:
    """The request overhead r0 + r1 x running that the simulator adds (docs/planning.md) through the
    measured outside times: least squares, each level weighted by its requests, both terms >= 0
    (one level, or levels at one load, give r0 alone)."""
    if not times:
        raise ValueError("no outside time to draw a request overhead from")
    w = np.array([float(t.n_client) for t in times])
    x = np.array([t.running for t in times])
    y = np.array([t.outside_s for t in times])
    mean_only = (float(np.average(y, weights=w)), 0.0)
    candidates = [mean_only]
    if np.ptp(x) > 0:
        xm, ym = float(np.average(x, weights=w)), float(np.average(y, weights=w))
        slope = float(np.sum(w * (x - xm) * (y - ym)) / np.sum(w * (x - xm) ** 2))
        candidates.append((ym - slope * xm, slope))
        candidates.append((0.0, float(np.sum(w * x * y) / np.sum(w * x * x))))  # through the origin
    feasible = [(a, b) for a, b in candidates if a >= 0 and b >= 0]
    return min(feasible, key=lambda ab: float(np.sum(w * (ab[0] + ab[1] * x - y) ** 2)))
