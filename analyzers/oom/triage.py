"""OOM triage: mark the oom playbook's steps from what `llmdiag oom` computed.

Each automatic step passes, fails, or could not be checked (the evidence it needs was not asked
for: no --log, no --ramp); manual steps are cited, and the fix steps carry the priced fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analyzers.model.memory import GiB, MemoryEstimate
from analyzers.oom.fixes import suggest_fixes
from playbooks.playbook import CannotCheck, PlaybookRun

_FIX_STEPS = {
    1: "oom.fix.paged-kv",
    2: "oom.fix.max-model-len",
    3: "oom.fix.long-requests",
    4: "oom.fix.concurrency-cap",
    5: "oom.fix.quantize",
}
TRANSIENT_SHARE = 0.25  # activations + buffers above this share of the KV budget fail oom.activations


def _need_model(est):
    if est is None:
        raise CannotCheck("needs the memory model (--model)")
    return est


@dataclass
class _Evidence:
    """What `llmdiag oom` gathered; each method is one automatic step's check (PlaybookRun.run's contract)."""

    est: MemoryEstimate | None
    findings: list | None
    ramp: Any  # the ramp result, None without --ramp

    def weights(self):
        e = _need_model(self.est)
        return e.loads, (
            f"weights {e.weights / GiB:.1f} GiB/GPU; all but KV {e.non_kv / GiB:.1f} of {e.usable / GiB:.1f} GiB usable"
        )

    def kv(self):
        e = _need_model(self.est)
        return e.fits_with_headroom, (
            f"{e.plan.concurrency} requested; KV holds {e.max_concurrency()}, {e.safe_concurrency()} with 20% headroom"
        )

    def activations(self):
        e = _need_model(self.est)
        transient = e.activations + e.comm_buffers + e.fragmentation
        ok = e.loads and transient <= TRANSIENT_SHARE * e.kv_budget
        return ok, (
            f"activations {e.activations / GiB:.2f} + comm {e.comm_buffers / GiB:.2f} + fragmentation "
            f"{e.fragmentation / GiB:.2f} GiB vs KV budget {max(e.kv_budget, 0) / GiB:.2f} GiB"
        )

    def _torch_findings(self):
        if self.findings is None:
            raise CannotCheck("needs an OOM message (--log FILE)")
        torch = [f for f in self.findings if f.kind == "torch_oom"]
        if not torch:
            raise CannotCheck("the log has no PyTorch allocator message (reserved vs allocated)")
        return torch

    def fragmentation(self):
        torch = self._torch_findings()
        frag = [f for f in torch if any(line.startswith("fragmentation") for line in f.explanation)]
        f = (frag or torch)[0]
        unalloc, want = f.numbers["reserved_unallocated"], f.numbers["tried_to_allocate"]
        return not frag, f"reserved-but-unallocated {unalloc / GiB:.2f} GiB vs {want / GiB:.2f} GiB asked for"

    def log(self):
        if self.findings is None:
            raise CannotCheck("needs a log (--log FILE)")
        return True, "; ".join(f.wording for f in self.findings)

    def concurrency_1(self):
        # A ramp that was run is the measurement; the memory model is the fallback.
        ramp = self.ramp
        if ramp is not None and ramp.levels:
            first = ramp.levels[0]
            ok = first.ok > 0 and first.errors == 0
            return ok, f"ramp level {first.concurrency}: {first.ok} ok, {first.errors} errors"
        e = _need_model(self.est)
        return e.loads and e.holds_one_request, (
            f"model: one request of {e.plan.max_model_len:,} tokens needs "
            f"{e.blocks_per_request(e.plan.max_model_len)} blocks, "
            f"the cache has {e.num_blocks:,}"
        )

    def ramp_check(self):
        ramp = self.ramp
        if ramp is None:
            raise CannotCheck("needs a live server (--ramp --target URL)")
        observed, estimate = ramp.observed_capacity, ramp.estimate
        if observed is None:
            raise CannotCheck(ramp.stop_reason)
        if estimate is None:
            raise CannotCheck(f"observed {observed}; the server exposes no vllm:cache_config_info to compare with")
        ok = bool(ramp.within_tolerance()) and ramp.kv_limited
        limited = "KV-limited" if ramp.kv_limited else "not KV-limited"
        return ok, f"observed {observed} concurrent ({limited}), estimate {estimate} ({observed / estimate - 1:+.0%})"


def _note_fixes(run: PlaybookRun, est: MemoryEstimate) -> None:
    """Each fix step cites the priced fixes that belong to it, one line per fix."""
    by_step: dict[int, list[str]] = {}
    for fix in suggest_fixes(est):
        by_step.setdefault(fix.step, []).append(f"{fix.change}: {fix.before} -> {fix.after}")
    for step, lines in by_step.items():
        run.note(_FIX_STEPS[step], "; ".join(lines))


def mark_oom_playbook(run: PlaybookRun, est: MemoryEstimate | None, findings: list | None, ramp) -> None:
    ev = _Evidence(est, findings, ramp)
    run.run(
        {
            "oom.weights": ev.weights,
            "oom.kv": ev.kv,
            "oom.activations": ev.activations,
            "oom.fragmentation": ev.fragmentation,
            "oom.log": ev.log,
            "oom.concurrency-1": ev.concurrency_1,
            "oom.ramp": ev.ramp_check,
        }
    )
    if est is not None:
        _note_fixes(run, est)
