"""A noisy neighbour on the host, the CPU check's cause (analyzers/triage/host/cpu.py): found from
what each request lived through, else from the spike windows against the calm, else as a neighbour
held through a whole level; named by pid, command and cores."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from analyzers.triage.contracts import CheckResult, Finding, failed
from analyzers.triage.evidence import SampleSplit, finite_mean, lift
from analyzers.triage.exposure import differential_in_time, held_windows
from analyzers.triage.held_spans import held_spans
from analyzers.triage.host.other_processes import PSI_FELT, SERVER_FELT_WAIT
from analyzers.triage.processes import per_process, spiking
from analyzers.triage.tail_windows import TailWindows
from analyzers.triage.throughout import NO_CONTRAST, held_throughout, level_windows
from rundir.table import RequestTable

# The CPU check's id and title: every finding it makes is a neighbour's but the one without
# per-process data (cpu.py).
CPU_ID, CPU_TITLE = "p99.host.cpu", "the host's CPU is not saturated"
HOST_BUSY_PCT = 90.0  # all cores this busy in the spikes: the host is saturated
NEIGHBOUR_CORES = 0.5  # other processes using at least this many cores in the spikes ...
NEIGHBOUR_LIFT = 1.5  # ... and this many times their calm use ...
NEIGHBOUR_EXTRA = 0.5  # ... and at least this many cores more than in the calm
PROCESS_EXTRA = 0.5  # named processes taking this many cores more in the spikes than in the calm
FELT_NEIGHBOUR_CORES = 0.25  # other processes above their background by this much, while the server waited
TOP_NAMED = 5
CONTEXT_SECONDS = 1.5  # a felt neighbour held this long is told as context even when it explains no tail


def find_neighbour(
    host: SampleSplit,
    others: np.ndarray,
    tails: TailWindows,
    table: RequestTable | None,
    top_others: dict[float, list[dict]],
    evidence: dict,
    busy_spike: float | None,
) -> CheckResult | None:
    """First what each request lived through (analyzers/triage/exposure.py): a neighbour active for
    7 s of a level is found even where the spike windows cover only part of it; then the spike
    windows' comparison, for runs without request-level contrast; last a neighbour present for a
    whole level, which no contrast inside the level can show (analyzers/triage/throughout.py); and
    failing all three, a neighbour the server felt that explains none of the tail, as context."""
    if table is not None:
        found = _neighbour_by_exposure(host, others, tails, table, top_others, evidence)
        if found is not None:
            return found
    if tails.spikes:
        found = _neighbour_by_spikes(host, others, tails, top_others, evidence, busy_spike)
        if found is not None:
            return found
    if table is None:
        return None
    found = _neighbour_throughout(host, others, tails, table, top_others, evidence)
    return found or felt_neighbour_as_context(host, others, tails, table, top_others, evidence)


def _neighbour_by_spikes(
    host: SampleSplit,
    others: np.ndarray,
    tails: TailWindows,
    top_others: dict[float, list[dict]],
    evidence: dict,
    busy_spike: float | None,
) -> CheckResult | None:
    """Other processes in the spike intervals against the calm: in the aggregate, and process by process."""
    o_spike, o_calm = finite_mean(others[host.spike]), finite_mean(others[~host.spike])
    evidence.update(other_cpu_cores_spikes=o_spike, other_cpu_cores_calm=o_calm)
    procs = per_process(top_others, host)
    burst = spiking(procs)
    extra = sum(p["cpu_cores_spikes"] - p["cpu_cores_calm"] for p in burst)
    aggregate = (
        o_spike is not None
        and o_spike >= NEIGHBOUR_CORES
        and lift(o_spike, o_calm) >= NEIGHBOUR_LIFT
        and o_spike - (o_calm or 0.0) >= NEIGHBOUR_EXTRA
    )
    # Per process: on a shared host a steady background hides the neighbour in the aggregate.
    if aggregate or extra >= PROCESS_EXTRA:
        named = burst or procs
        evidence["top_others_spikes"] = named[:TOP_NAMED]
        who = ", ".join(
            f"{p['comm']} (pid {p['pid']}, {p['cpu_cores_spikes']:.2f} cores vs {p['cpu_cores_calm']:.2f})"
            for p in named[:3]
        )
        if len(burst) > 3:
            who += f" and {len(burst) - 3} more"
        psi = evidence.get("cpu_pressure_some_share_spikes")
        pids = {p["pid"] for p in burst}
        mask = (
            np.nan_to_num(others) >= NEIGHBOUR_CORES
            if not burst
            else np.array(
                [any(int(q.get("pid", -1)) in pids for q in top_others.get(float(t), []) or []) for t in host.end]
            )
        )
        explains = host.windows_where(tails, mask)
        took = (
            f"{extra:.1f} cores more in the spike windows than in the calm"
            if burst
            else f"{o_spike:.1f} cores in the spike windows vs {o_calm or 0:.1f} in the calm"
        )
        finding = Finding(
            CPU_ID,
            "host",
            "high" if (busy_spike or 0) >= HOST_BUSY_PCT else "medium",
            f"other processes took {took} (a noisy neighbour"
            + (f": {who}" if who else "")
            + ")"
            + (f"; tasks waited for a CPU {psi:.0%} of the time" if psi else ""),
            evidence,
            explains,
            len(tails.spikes),
            "move the neighbour, or pin the server to cores of its own (taskset/cpuset)",
        )
        return failed(finding, CPU_TITLE, finding.title)
    return None


def _neighbour_by_exposure(
    host: SampleSplit,
    others: np.ndarray,
    tails: TailWindows,
    table: RequestTable,
    top_others: dict[float, list[dict]],
    evidence: dict,
) -> CheckResult | None:
    """Other processes as a condition in time: the probe intervals where they held clearly more than
    their steady background (a shared host's compilers and tests are the body's too)."""
    o = np.nan_to_num(others)
    held, level = _held(host, o)
    spans = held_spans(host.start, host.end, held, o)
    found = differential_in_time(table, tails.metric, spans.held, spans.sure)
    if found is None or not found.diff.separates:
        return None
    diff, seconds = found.diff, found.seconds
    named = spiking(per_process(top_others, replace(host, spike=held)))
    who = _who(named)
    if len(named) > 3:
        who += f" and {len(named) - 3} more"
    ev = dict(
        evidence,
        **diff.evidence(),
        neighbour_cores_threshold=round(level, 2),
        neighbour_cores_when_held=finite_mean(o[held]),
        neighbour_seconds=round(seconds, 1),
        top_others_when_held=named[:TOP_NAMED],
    )
    held_words = f"{seconds:.0f} s when other processes held {finite_mean(o[held]) or 0:.1f} cores"
    finding = Finding(
        CPU_ID,
        "host",
        "high" if diff.attributable >= 0.6 else "medium",
        f"a noisy neighbour: other processes took {finite_mean(o[held]) or 0:.1f} cores for "
        f"{seconds:.0f} s" + (f" ({who})" if who else "") + "; " + diff.words(tails.metric, "the " + held_words),
        ev,
        found.windows,
        len(tails.spikes),
        "move the neighbour, or pin the server to cores of its own (taskset/cpuset)",
        kind="differential",
        tail_share=diff.attributable,
    )
    return failed(finding, CPU_TITLE, finding.title)


def _held(host: SampleSplit, o: np.ndarray) -> tuple[np.ndarray, float]:
    """(the probe intervals where other processes held clearly more than their background, that
    background plus the margin)."""
    if host.has("server_cpu_wait_share"):
        # Where the server's own waits were read, a smaller neighbour counts when the server felt it:
        # half a core taken from a server pinned to one core is the server's loss however small a
        # share of the host it is (the differential still has to separate tail from body).
        # The background is the quietest quarter of the run: a neighbour there half the time would
        # lift a median to itself.
        felt = np.nan_to_num(host.values("server_cpu_wait_share")) >= SERVER_FELT_WAIT
        level = max(FELT_NEIGHBOUR_CORES, float(np.percentile(o, 25)) + FELT_NEIGHBOUR_CORES)
        return (o >= level) & felt, level
    level = max(NEIGHBOUR_CORES, float(np.median(o)) + NEIGHBOUR_EXTRA)
    return o >= level, level


def felt_neighbour_as_context(
    host: SampleSplit,
    others: np.ndarray,
    tails: TailWindows,
    table: RequestTable,
    top_others: dict[float, list[dict]],
    evidence: dict,
) -> CheckResult | None:
    """A neighbour the server felt (its threads waited for a CPU while other processes held at least
    NEIGHBOUR_CORES, for CONTEXT_SECONDS or more) whose requests were not measurably slower than the
    rest: not the tail's cause, but what an engineer reading the run should still be told (a level
    whose TTFT is its queue hides two seconds of slower steps). A finding that explains none of the
    tail, so the ranking keeps it as context. Only where the server's own waits were read."""
    if not host.has("server_cpu_wait_share"):
        return None
    o = np.nan_to_num(others)
    held, _ = _held(host, o)
    held &= o >= NEIGHBOUR_CORES
    windows = held_windows(host.start, host.end, held)
    found = differential_in_time(table, tails.metric, windows)
    if found is None or found.seconds < CONTEXT_SECONDS:
        return None
    cores, waited = finite_mean(o[held]) or 0.0, finite_mean(np.nan_to_num(host.values("server_cpu_wait_share"))[held])
    named = spiking(per_process(top_others, replace(host, spike=held)))
    who = _who(named)
    ev = dict(
        evidence,
        **found.diff.evidence(),
        neighbour_cores_when_held=round(cores, 2),
        neighbour_seconds=round(found.seconds, 1),
        server_wait_share_when_held=None if waited is None else round(waited, 3),
        top_others_when_held=named[:TOP_NAMED],
    )
    finding = Finding(
        CPU_ID,
        "host",
        "low",
        f"a neighbour the server felt: other processes took {cores:.1f} cores for {found.seconds:.0f} s"
        + (f" ({who})" if who else "")
        + (f" while the server's threads waited for a CPU {waited:.0%} of the time" if waited is not None else "")
        + "; the requests that lived through it were not measurably slower than the rest, so it is "
        "not the tail's cause",
        ev,
        found.windows,
        len(tails.spikes),
        "move the neighbour, or pin the server to cores of its own (taskset/cpuset)",
        kind="differential",
        tail_share=0.0,
    )
    return failed(finding, CPU_TITLE, finding.title)


def _neighbour_throughout(
    host: SampleSplit,
    others: np.ndarray,
    tails: TailWindows,
    table: RequestTable,
    top_others: dict[float, list[dict]],
    evidence: dict,
) -> CheckResult | None:
    """A neighbour present for the whole of a level (analyzers/triage/throughout.py): other
    processes held cores in nearly every interval of it, and the server's own threads waited for a
    CPU (schedstat; PSI where the server's threads were not read)."""
    o = np.nan_to_num(others)
    if host.has("server_cpu_wait_share"):
        waited, waited_field = np.nan_to_num(host.values("server_cpu_wait_share")), "server_cpu_wait_share"
        felt = waited >= SERVER_FELT_WAIT
    elif host.has("cpu_pressure_some_share"):
        waited, waited_field = np.nan_to_num(host.values("cpu_pressure_some_share")), "cpu_pressure_some_share"
        felt = waited >= PSI_FELT
    else:
        waited, waited_field = np.ones(o.shape), None
        felt = np.ones(o.shape, dtype=bool)
    held = held_throughout(host, (o >= NEIGHBOUR_CORES) & felt, level_windows(table, tails.metric))
    if not held:
        return None
    rows = np.unique(np.concatenate([h.rows for h in held]))
    cores, wait = finite_mean(o[rows]) or 0.0, finite_mean(waited[rows])
    named = per_process(top_others, replace(host, spike=np.isin(np.arange(o.size), rows)))[:TOP_NAMED]
    who = _who(named)
    levels = ", ".join(h.words() for h in held)
    # Over the levels it held: no spike-against-calm figures, which say nothing of a condition that
    # was everywhere.
    ev = dict(
        cores=evidence.get("cores"),
        throughout_levels=[h.level_id for h in held],
        neighbour_cores_throughout=round(cores, 2),
        top_others_throughout=named,
        waited_field=waited_field,
        waited_share_throughout=None if wait is None or waited_field is None else round(wait, 3),
        server_cpu_cores_throughout=_mean_over(host, "server_cpu_cores", rows),
        client_cpu_cores_throughout=_mean_over(host, "client_cpu_cores", rows),
    )
    whose_wait = (
        "the server's threads waited for a CPU"
        if waited_field == "server_cpu_wait_share"
        else "some task waited for a CPU"
    )
    title = (
        f"a noisy neighbour throughout {levels}: other processes held {cores:.1f} of "
        f"{len(host.fields('cpu_per_core_pct.')) or 1} cores"
        + (f" ({who})" if who else "")
        + (f", and {whose_wait} {wait:.0%} of the time" if waited_field and wait is not None else "")
        + f"; {NO_CONTRAST}"
    )
    finding = Finding(
        CPU_ID,
        "host",
        "high",
        title,
        ev,
        [h.window for h in held],
        len(tails.spikes),
        "rerun with the neighbour gone, or pin the server to cores of its own (taskset/cpuset), "
        "and compare the runs (llmbench compare)",
        kind="throughout",
    )
    return failed(finding, CPU_TITLE, finding.title)


def _who(named: list[dict]) -> str:
    """The first three named processes, as a finding's title names them."""
    return ", ".join(f"{p['comm']} (pid {p['pid']}, {p['cpu_cores_spikes']:.2f} cores)" for p in named[:3])


def _mean_over(host: SampleSplit, name: str, rows: np.ndarray) -> float | None:
    mean = finite_mean(host.values(name)[rows]) if host.has(name) else None
    return None if mean is None else round(mean, 3)
