"""A neighbour's first and last probe intervals are averages over the interval: the condition held
for part of them (analyzers/triage/exposure.py, edge_trimmed_windows)."""

from __future__ import annotations

import numpy as np
from planted import base_records, clean_probes, stalled, write_run

from analyzers.triage.exposure import edge_trimmed_windows
from analyzers.triage.p99 import diagnose_p99
from analyzers.triage.tail_windows import Window


def test_a_run_of_held_intervals_is_trimmed_at_its_edges_by_their_level_over_its_peak():
    start, end = np.array([0.0, 1.0, 2.0, 3.0, 5.0]), np.array([1.0, 2.0, 3.0, 4.0, 6.0])
    held = np.array([True, True, True, False, True])
    level = np.array([0.4, 1.6, 0.8, 0.0, 0.3])
    windows = edge_trimmed_windows(start, end, held, level)
    # began late in the first (a quarter of it, its end), ended early in the last (half, its start);
    # a lone interval has no side to trim toward and is kept whole
    assert windows == [Window(0.75, 1.0), Window(1.0, 2.0), Window(2.0, 2.5), Window(5.0, 6.0)]


def test_a_run_all_edges_is_trimmed_against_the_level_another_runs_interior_read():
    """The neighbour held 1.6 cores through a long run, then came back for 0.8 s of each of two probe
    seconds (1.28 cores each): that short run's own peak is a part of an interval, so against it both
    would read as whole; against the 1.6 cores read inside the long run, each is trimmed to 0.8 s on
    the side next to the other. Without a long run to read the full level from, it stays whole."""
    start = np.arange(0.0, 8.0)
    end = start + 1.0
    held = np.array([True, True, True, True, False, False, True, True])
    level = np.array([1.6, 1.6, 1.6, 0.4, 0.0, 0.0, 1.28, 1.28])
    windows = edge_trimmed_windows(start, end, held, level)
    assert windows[:4] == [Window(0.0, 1.0), Window(1.0, 2.0), Window(2.0, 3.0), Window(3.0, 3.25)]
    assert np.allclose([(w.start, w.end) for w in windows[4:]], [(6.2, 7.0), (7.0, 7.8)])
    alone = edge_trimmed_windows(start[6:], end[6:], held[6:], level[6:])
    assert alone == [Window(6.0, 7.0), Window(7.0, 8.0)]


def _stall_then_recovery(tmp_path, recovery_level: float):
    """c=16: a neighbour holds 1.6 cores for 3 s and exits 0.3 s into the next probe second. A closed
    loop sends few requests while stalled (1 in 8 kept here), each 400 ms late; the recovery's many
    fast requests follow in the same second the neighbour exited in, which reads `recovery_level`."""
    recs = base_records(n=1200, concurrency=16, seed=3)
    t0 = recs[0].t_sent
    on, off = t0 + 6.0, t0 + 9.3
    kept = stalled(recs, on, off, 0.4, keep_every=8)
    probes = clean_probes(t0 - 1, max(r.t_done for r in kept) + 1, ncpu=2)
    for row in probes["host"]:
        row.update(server_cpu_cores=1.0, cpu_pct=55.0, others_cpu_cores=0.0)
        level = 1.6 if on < row["t"] <= on + 3.0 else recovery_level if on + 3.0 < row["t"] <= on + 4.0 else 0.0
        if level:
            row.update(
                others_cpu_cores=level,
                cpu_pct=min(100.0, 50.0 * (1.05 + level)),
                server_cpu_wait_share=0.75,
                top_others=[{"pid": 900 + k, "comm": "burn", "cpu_cores": level / 4} for k in range(4)],
            )
    return write_run(tmp_path / "r", kept, probes, url="http://127.0.0.1:8000")


def test_a_neighbour_that_exited_early_in_a_probe_second_is_named_despite_the_recovery_in_it(tmp_path):
    diag = diagnose_p99(_stall_then_recovery(tmp_path, recovery_level=0.5))
    assert diag.findings and diag.findings[0].check_id == "p99.host.cpu", (diag.headline, diag.context)
    f = diag.findings[0]
    assert f.kind == "differential" and f.evidence["exposed_latency_vs_unexposed"] >= 1.3, f.evidence
