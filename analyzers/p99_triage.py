"""`llmdiag p99`: why the tail is bad, checked in the seed's order (network, scheduling, host),
each finding tied to the spike windows it coincides with, and the p99 playbook marked.

Everything comes from the run directory: requests.jsonl for the tail and its windows, and the
probes (tcp, irq, server, host, gpu) for the evidence. A check whose data is missing says so
("could not be checked") instead of passing; with clean data the answer is "no cause found
among: ..." and never an invented one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from analyzers.diagnosis_error import DiagnosisError
from analyzers.distribution import MIN_SAMPLES_FOR_P99
from analyzers.probe_series import read_probe
from analyzers.tail_windows import TailWindows, find_tail_windows
from analyzers.triage_evidence import split_samples
from analyzers.triage_host import check_cpu, check_gpu_throttle
from analyzers.triage_network import check_collectives, check_irq_affinity, check_link_saturation, check_retransmits
from analyzers.triage_requests import check_hol_blocking, check_send_lag
from analyzers.triage_server import check_batch_size, check_preemptions, check_queueing
from analyzers.triage_types import CheckResult, Finding, rank
from rundir import RunDir
from rundir.table import RequestTable

PROBES = ("tcp", "irq", "server", "host", "gpu")
WINDOWS_ID = "p99.windows"


@dataclass
class P99Diagnosis:
    run_id: str
    metric: str
    tails: TailWindows
    checks: list[CheckResult]
    findings: list[Finding]          # ranked, most likely cause first

    @property
    def headline(self) -> str:
        if self.findings:
            return self.findings[0].title
        looked = [c.check_id for c in self.checks if c.status == "passed"]
        return "no cause found among: " + ", ".join(looked)

    def to_dict(self) -> dict:
        t = self.tails
        return {"run_id": self.run_id, "metric": self.metric, "headline": self.headline,
                "span": asdict(t.span), "spike_windows": [asdict(w) for w in t.spikes],
                "spike_seconds": t.spike_s, "calm_seconds": t.calm_s, "levels": [asdict(lv) for lv in t.levels],
                "findings": [dict(asdict(f), coverage=f.coverage) for f in self.findings],
                "checks": [{"check_id": c.check_id, "category": c.category, "title": c.title, "status": c.status,
                            "detail": c.detail} for c in self.checks]}


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
    p = {name: split_samples(read_probe(run.probe_file(name), name), tails) for name in PROBES}
    checks = [
        check_retransmits(p["tcp"], tails), check_irq_affinity(p["irq"], p["host"], tails),
        check_link_saturation(), check_collectives(),
        check_hol_blocking(table, ttft), check_preemptions(p["server"], tails), check_queueing(p["server"], tails),
        check_batch_size(p["server"], tails),
        check_cpu(p["host"], tails), check_gpu_throttle(p["gpu"], tails),
        check_send_lag(table, ttft),
    ]
    findings = rank([c.finding for c in checks if c.finding is not None])
    return P99Diagnosis(run.read_info().run_id, metric, tails, checks, findings)


def mark_playbook(diag: P99Diagnosis):
    """The p99 playbook with every automatic step this diagnosis checked marked."""
    from playbooks.playbook import PlaybookRun, load_playbook

    run = PlaybookRun(load_playbook("p99"))
    t = diag.tails
    small = [lv.level_id for lv in t.levels if lv.n < MIN_SAMPLES_FOR_P99]
    windows = (f"{len(t.spikes)} spike window(s), {t.spike_s:.1f} s of {t.span.seconds:.1f} s"
               if t.spikes else "no spikes: every level's tail is within its threshold")
    if small:
        windows += f"; P99 from < {MIN_SAMPLES_FOR_P99} samples in {', '.join(small)} (unreliable)"
    run.passed(WINDOWS_ID, windows)
    ids = set(run.playbook.ids)
    for c in diag.checks:
        if c.check_id not in ids:
            continue
        if c.status == "failed":
            run.failed(c.check_id, c.detail)
        elif c.status == "passed":
            run.passed(c.check_id, c.detail)
        else:
            run.unchecked(c.check_id, c.detail)
    return run


def diagnosis_record(diag: P99Diagnosis) -> dict:
    """What diagnosis_p99.json holds: the diagnosis and its marked playbook."""
    return diag.to_dict() | {"playbook": mark_playbook(diag).to_dict()}


def save_diagnosis(run: RunDir, record: dict) -> None:
    run.write_json(run.diagnosis_p99_json, record)
