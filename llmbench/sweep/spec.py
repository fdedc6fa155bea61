"""SweepSpec: the contract's sweep plan (rundir.SweepInfo), validated, as the levels loadgen runs:
concurrency or request rate x input length x output length, each with its timeline (fixed, or
sized: docs/metrics.md, "Sizing a level")."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import cast

from loadgen.specs import LevelSpec, level_seed
from rundir import RunInfo, SweepInfo


@dataclass
class SweepSpec(SweepInfo):
    """The contract's sweep plan (rundir.SweepInfo, where the defaults live), validated, as levels."""

    @classmethod
    def of(cls, info: SweepInfo) -> "SweepSpec":
        return cls(**{f.name: getattr(info, f.name) for f in dataclasses.fields(SweepInfo)})

    def __post_init__(self) -> None:
        if bool(self.concurrency) == bool(self.request_rate):
            raise ValueError("give either --concurrency or --request-rate levels (exactly one of them)")
        if any(c < 1 for c in self.concurrency):
            raise ValueError("every concurrency level must be >= 1")
        if any(r <= 0 for r in self.request_rate):
            raise ValueError("every request rate must be > 0 requests/s")
        if any(n < 1 for n in self.input_lens + self.output_lens):
            raise ValueError("input and output lengths must be >= 1 token")
        if self.duration_s <= 0 or self.warmup_s < 0 or self.request_timeout_s <= 0:
            raise ValueError("--duration and --request-timeout must be > 0 and --warmup >= 0")
        if self.workers < 1:
            raise ValueError("--workers must be >= 1")
        if (self.steady_warmup or self.sample_target is not None) and not (
            self.max_duration_s is not None and self.max_duration_s >= max(self.warmup_s, self.duration_s)
        ):
            raise ValueError(
                "--max-duration must be at least the minimum warm-up and window it bounds "
                f"({self.warmup_s:g} s, {self.duration_s:g} s)"
            )

    def _sizing(self, closed_loop: bool) -> dict:
        """A level's sizing (docs/metrics.md, "Sizing a level"): a steady warm-up only where there
        are users to finish requests (closed loop); a sized window except for a trace, whose own
        times are the experiment (its window is --duration)."""
        steady = self.steady_warmup and closed_loop
        target = self.sample_target if self.workload.kind != "trace" else None
        return {
            "steady_warmup": steady,
            "sample_target": target,
            "max_duration_s": self.max_duration_s if steady or target is not None else None,
        }

    def levels(self) -> list[LevelSpec]:
        loads = [("c", c, None) for c in self.concurrency] + [("r", None, r) for r in self.request_rate]
        out = []
        for inp in self.input_lens:
            for outl in self.output_lens:
                for prefix, c, r in loads:
                    load = c if c is not None else f"{r:g}"
                    level_id = f"{prefix}{load}-in{inp}-out{outl}"
                    out.append(
                        LevelSpec(
                            level_id=level_id,
                            concurrency=c,
                            request_rate=r,
                            burstiness=self.burstiness,
                            input_len=inp,
                            output_len=outl,
                            warmup_s=self.warmup_s,
                            duration_s=self.duration_s,
                            request_timeout_s=self.request_timeout_s,
                            workers=self.workers,
                            seed=level_seed(self.seed, level_id),
                            **self._sizing(c is not None),
                        )
                    )
        return out


def spec_of(info: RunInfo) -> SweepSpec:
    """run.json's sweep as the SweepSpec the sweep's setup made it (new_run_info for a new run,
    resumed_run on --resume): RunInfo types it as the contract's SweepInfo."""
    return cast(SweepSpec, info.sweep)
