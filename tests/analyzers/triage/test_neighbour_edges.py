"""A neighbour's first and last probe intervals are averages over the interval: the condition held
for part of them (analyzers/triage/held_spans.py)."""

from __future__ import annotations

import numpy as np
from planted import base_records, clean_probes, stalled, write_run

from analyzers.triage.held_spans import held_spans
from analyzers.triage.p99 import diagnose_p99
from analyzers.triage.tail_windows import Window


def test_a_runs_partial_edges_are_trimmed_next_to_its_plateau_and_only_the_plateau_is_sure():
    start, end = np.array([0.0, 1.0, 2.0, 3.0, 5.0]), np.array([1.0, 2.0, 3.0, 4.0, 6.0])
    held = np.array([True, True, True, False, True])
    level = np.array([0.4, 1.6, 0.8, 0.0, 0.3])
    spans = held_spans(start, end, held, level)
    # began late in the first (a quarter of it, its end), ended early in the last (half, its start);
    # a lone interval has no side to trim toward and is kept whole
    assert spans.held == [Window(0.75, 1.0), Window(1.0, 2.0), Window(2.0, 2.5), Window(5.0, 6.0)]
    assert spans.sure == [Window(1.0, 2.0), Window(5.0, 6.0)]
    assert np.isclose(spans.seconds, 0.25 + 1.0 + 0.5 + 1.0)


def test_a_neighbour_leaving_over_two_probe_seconds_is_trimmed_over_both():
    """8 burners held 1.6 cores for three seconds and left over the next two (0.97, then 0.42 cores):
    both are partial, not only the last, and together they hold it for 0.86 s after the plateau
    (seed 9, draw 5, where the burners had left 0.24 s before that: the effect is read on the plateau)."""
    start = np.arange(0.0, 7.0)
    end = start + 1.0
    held = np.array([True, True, True, True, True, True, False])
    level = np.array([0.66, 1.59, 1.59, 1.62, 0.97, 0.42, 0.0])
    spans = held_spans(start, end, held, level)
    assert spans.sure == [Window(1.0, 2.0), Window(2.0, 3.0), Window(3.0, 4.0)]
    assert np.allclose(
        [(w.start, w.end) for w in spans.held], [(0.593, 1), (1, 2), (2, 3), (3, 4), (4, 4.858)], atol=1e-3
    )


def test_a_run_all_edges_is_trimmed_against_the_level_another_runs_interior_read():
    """The neighbour held 1.6 cores through a long run, then came back for 0.8 s of each of two probe
    seconds (1.28 cores each): that short run's own peak is a part of an interval, so against it both
    would read as whole; against the 1.6 cores read inside the long run, neither is on the plateau,
    and each is trimmed to 0.8 s on the side next to the other. Without a long run to read the full
    level from, they are the plateau."""
    start = np.arange(0.0, 8.0)
    end = start + 1.0
    held = np.array([True, True, True, True, False, False, True, True])
    level = np.array([1.6, 1.6, 1.6, 0.4, 0.0, 0.0, 1.28, 1.28])
    spans = held_spans(start, end, held, level)
    assert spans.held[:4] == [Window(0.0, 1.0), Window(1.0, 2.0), Window(2.0, 3.0), Window(3.0, 3.25)]
    assert np.allclose([(w.start, w.end) for w in spans.held[4:]], [(6.2, 7.0), (7.0, 7.8)])
    assert spans.sure[3:] == spans.held[4:]  # a run without a plateau: its estimate is all there is
    alone = held_spans(start[6:], end[6:], held[6:], level[6:])
    assert alone.held == alone.sure == [Window(6.0, 7.0), Window(7.0, 8.0)]


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
