"""`llmdiag p99`: why the tail is bad, checked in the seed's order (network, scheduling, host),
each finding tied to the spike windows it coincides with, and the p99 playbook marked.

Two kinds of tail: spikes (a few requests far above their level's median, analyzers/triage/tail_windows.py)
and standing tails (a level that misses the SLO or sits far above the unloaded baseline throughout,
analyzers/triage/levels.py), the latter split into queue, prefill and decode time
(analyzers/triage/standing/). Findings rank by the share of the run's tail requests they explain
(analyzers/triage/tail_shares.py); one that explains less than CONTEXT_SHARE is context, not a
cause. Evidence must be the target's: its own connections, its own process; host-wide counters are
context.

Everything comes from the run directory: requests.jsonl for the tail and its windows, and the
probes (tcp, irq, server, host, gpu) for the evidence. A check whose data is missing says so
("could not be checked") instead of passing; with clean data the answer is "no cause found
among: ..." and never an invented one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from analyzers.diagnosis_error import DiagnosisError
from analyzers.probe_series import read_probe
from analyzers.stats.distribution import MIN_SAMPLES_FOR_P99
from analyzers.triage.client_lag import check_send_lag
from analyzers.triage.contracts import CheckResult, Finding, split_causes
from analyzers.triage.evidence import split_samples
from analyzers.triage.failures import check_failures
from analyzers.triage.fleet.checks import check_fleet
from analyzers.triage.fleet.imbalance import router_queue_yields
from analyzers.triage.fleet.own_witness import own_witness_yields
from analyzers.triage.fleet.replica_failures import narrow_failures
from analyzers.triage.fleet.router import router_path_yields
from analyzers.triage.host.cpu import check_cpu
from analyzers.triage.host.gpu_throttle import check_gpu_throttle
from analyzers.triage.host.pauses import check_pauses, pauses_yield_to_a_neighbour, queue_yields_to_pauses
from analyzers.triage.levels import LevelLoad, level_loads
from analyzers.triage.long_prompts import check_long_prompts
from analyzers.triage.network import (
    check_collectives,
    check_irq_affinity,
    check_link_saturation,
    check_retransmits,
    target_locality,
)
from analyzers.triage.phases import level_phases
from analyzers.triage.processes import read_top_others
from analyzers.triage.queue_seconds import queue_bounded_by_its_seconds
from analyzers.triage.requests import check_hol_blocking
from analyzers.triage.server import check_batch_size, check_preemptions, check_queueing, server_absence
from analyzers.triage.standing.check import check_standing
from analyzers.triage.standing.limits import engine_limits
from analyzers.triage.tail_shares import (
    baseline_lived_through_it,
    last_resort_yields,
    set_tail_shares,
    unmeasured_is_a_cause,
)
from analyzers.triage.tail_windows import METRIC_SPANS, TailWindows, find_tail_windows
from analyzers.triage.throughout import level_windows
from rundir import RunDir
from rundir.table import RequestTable

PROBES = ("tcp", "irq", "server", "host", "gpu")
WINDOWS_ID = "p99.windows"
STANDING_STEP = "p99.standing"  # the playbook step every standing-tail cause marks


@dataclass
class P99Diagnosis:
    run_id: str
    metric: str
    tails: TailWindows
    checks: list[CheckResult]
    findings: list[Finding]  # ranked causes, most likely first
    context: list[Finding] = field(default_factory=list)  # findings that explain little of the tail
    levels: list[LevelLoad] = field(default_factory=list)  # each level's standing-tail verdict
    tail_requests: int = 0  # spike requests and standing-tail requests together

    @property
    def notes(self) -> list[str]:
        """What was seen that is not the target's problem, e.g. other flows' retransmits."""
        return [c.context for c in self.checks if c.context]

    @property
    def headline(self) -> str:
        if self.findings:
            return self.findings[0].title
        looked = [c.check_id for c in self.checks if c.status == "passed"]
        return "no cause found among: " + ", ".join(dict.fromkeys(looked))

    def to_dict(self) -> dict:
        t = self.tails
        return {
            "run_id": self.run_id,
            "metric": self.metric,
            "headline": self.headline,
            "span": asdict(t.span),
            "spike_windows": [asdict(w) for w in t.spikes],
            "spike_seconds": t.spike_s,
            "calm_seconds": t.calm_s,
            "levels": [asdict(lv) for lv in t.levels],
            "findings": [dict(asdict(f), coverage=f.coverage) for f in self.findings],
            "context": [dict(asdict(f), coverage=f.coverage) for f in self.context],
            "notes": self.notes,
            "tail_requests": self.tail_requests,
            "standing_levels": [
                {
                    "level_id": lv.level_id,
                    "load": lv.load,
                    "n": lv.n,
                    "p50": lv.p50,
                    "slo_stat": lv.slo_stat,
                    "slo_bound": lv.slo_bound,
                    "why": lv.why,
                    "tail_requests": int(lv.tail_rows.size),
                }
                for lv in self.levels
                if lv.standing
            ],
            "checks": [
                {
                    "check_id": c.check_id,
                    "category": c.category,
                    "title": c.title,
                    "status": c.status,
                    "detail": c.detail,
                    "context": c.context,
                }
                for c in self.checks
            ],
        }


def diagnose_p99(run: RunDir, metric: str = "ttft") -> P99Diagnosis:
    if not run.exists():
        raise DiagnosisError(f"{run.path} is not a run directory (no run.json)")
    table = RequestTable.load(run)
    if not len(table):
        raise DiagnosisError(f"{run.path} has no request records (requests.jsonl is missing or empty)")
    try:
        tails = find_tail_windows(table, metric)
    except ValueError as exc:
        raise DiagnosisError(str(exc)) from None
    ttft = tails if metric == "ttft" else find_tail_windows(table, "ttft")
    info = run.read_info()
    series = {name: read_probe(run.probe_file(name), name) for name in PROBES}
    # A server probe that never read a page is no evidence: its checks say it failed, and why.
    server_absent = server_absence((info.probes or {}).get("server"), series["server"])
    if server_absent:
        series["server"] = None
    p = {name: split_samples(series[name], tails) for name in PROBES}
    # The embedded engine is the sweep's own subprocess on this host (its URL is not recorded).
    locality = (
        "this host (the embedded engine)"
        if info.target.kind == "embedded"
        else target_locality(info.target.url, (info.host or {}).get("hostname"))
    )
    levels = level_loads(table, info, metric)
    top_others = read_top_others(run.probe_file("host"))
    rows = table.level_rows()
    phases = {
        lv.level_id: level_phases(
            table,
            lv.level_id,
            lv.tail_rows if lv.unfinished else rows[lv.level_id][_ok(table, metric)[rows[lv.level_id]]],
            lv.window,
            series["server"],
            series["host"],
            top_others,
        )
        for lv in levels
        if lv.standing or lv.level_id == lv.baseline_level
    }
    limits = engine_limits(
        info.target.engine_args, info.target.kind == "embedded", info.target.replicas, info.target.engine_facts
    )
    checks = [
        check_failures(table, metric),
        *check_fleet(table, tails, info.target, series["server"], series["tcp"], series["host"]),
        check_retransmits(p["tcp"], tails, locality, level_windows(table, metric), table),
        check_irq_affinity(p["irq"], p["host"], tails, locality),
        check_link_saturation(),
        check_collectives(),
        check_hol_blocking(table, ttft),
        check_long_prompts(table, tails),
        check_preemptions(p["server"], tails, server_absent, table),
        check_queueing(p["server"], tails, server_absent),
        check_batch_size(p["server"], tails, server_absent),
        *check_standing(metric, levels, phases, limits, locality is not None),
        check_cpu(p["host"], tails, top_others, table),
        check_pauses(table, tails),
        check_gpu_throttle(p["gpu"], tails),
        check_send_lag(table, ttft, series["server"], series["host"]),
    ]
    found = [c.finding for c in checks if c.finding is not None]
    baseline_lived_through_it(found, levels)
    tail = set_tail_shares(table, metric, tails, levels, found)
    queue_bounded_by_its_seconds(found, tail, metric, levels, p["server"])
    narrow_failures(found)
    pauses_yield_to_a_neighbour(found)
    queue_yields_to_pauses(found, _scrape_interval(series["server"]))
    unmeasured_is_a_cause(found)
    last_resort_yields(found)
    router_queue_yields(found)
    own_witness_yields(found)
    router_path_yields(found)
    causes, context = split_causes(found)
    return P99Diagnosis(info.run_id, metric, tails, checks, causes, context, levels, int(tail.rows.size))


def _scrape_interval(server) -> float:
    """The server probe's typical interval (1 s by default; 1 s without a probe)."""
    if server is None or len(server) < 2:
        return 1.0
    return float(np.median(np.diff(server.t)))


def _ok(table: RequestTable, metric: str) -> np.ndarray:
    col = METRIC_SPANS[metric][2]
    df = table.df
    return (df["status"] == "ok").to_numpy() & df["in_window"].to_numpy() & df[col].notna().to_numpy()


def mark_playbook(diag: P99Diagnosis):
    """The p99 playbook with every automatic step this diagnosis checked marked."""
    from playbooks.playbook import PlaybookRun, load_playbook

    run = PlaybookRun(load_playbook("p99"))
    t = diag.tails
    small = [lv.level_id for lv in t.levels if lv.n < MIN_SAMPLES_FOR_P99]
    windows = (
        f"{len(t.spikes)} spike window(s), {t.spike_s:.1f} s of {t.span.seconds:.1f} s"
        if t.spikes
        else "no spikes: every level's tail is within its threshold"
    )
    if small:
        windows += f"; P99 from < {MIN_SAMPLES_FOR_P99} samples in {', '.join(small)} (unreliable)"
    run.passed(WINDOWS_ID, windows)
    ids = set(run.playbook.ids)
    standing = [c for c in diag.checks if c.finding is not None and c.finding.kind == "standing"]
    # Failures last, so that a step checked twice (spikes, then a standing level) shows the failure.
    for c in sorted(diag.checks, key=lambda c: c.status == "failed"):
        step = c.check_id if c.check_id in ids else STANDING_STEP if c in standing else None
        if step is None:
            continue
        if c.status == "failed":
            detail = c.detail
            if step == STANDING_STEP:
                detail = "; ".join(s.detail for s in standing)
            run.failed(step, detail)
        elif c.status == "passed":
            run.passed(step, c.detail)
        else:
            run.unchecked(step, c.detail)
    return run


def diagnosis_record(diag: P99Diagnosis) -> dict:
    """What diagnosis_p99.json holds: the diagnosis and its marked playbook."""
    return diag.to_dict() | {"playbook": mark_playbook(diag).to_dict()}


def save_diagnosis(run: RunDir, record: dict) -> None:
    run.write_json(run.diagnosis_p99_json, record)
