"""The prediction record (prediction.json): each level of the run as a machine profile predicts it.

`llmbench sweep --profile FILE` (at its end) and `llmbench report RUN --profile FILE` write it: the
face simulates the run's own levels with the planner (docs/planning.md) and records what it
predicts, never what was measured; the analyzers hold it against the measurement each time a report
is made (analyzers/plan/departures.py), so re-analysing a run never leaves a stale comparison.
Keys this version does not know are kept in each record's `extra` and written back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rundir.record_json import record_from_dict, record_to_dict

PREDICTED_METRICS = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p95_s", "output_tok_s")
PROFILE_SOURCES = ("measured", "published", "fitted")
# Whose machine the profile describes, as far as the run can tell:
#   this_machine   an embedded target and a profile measured (or fitted) on the host that ran the sweep;
#   other_machine  an embedded target and a profile of another machine (a published GPU, another host,
#                  or one that does not say where it was measured): the prediction is not of this run;
#   assumed        an external target: nothing tells which hardware serves it, the profile is an assumption.
PROFILE_SCOPES = ("this_machine", "other_machine", "assumed")


@dataclass
class ProfileRef:
    """Which machine profile predicted (analyzers/plan/profile.py's MachineProfile, by its identity)."""

    name: str
    source: str  # measured | published | fitted
    host: str = ""  # where a measured profile was measured ("" : it does not say)
    created: str = ""
    path: str = ""  # the file or published name it was given as (--profile)
    assumptions: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source not in PROFILE_SOURCES:
            raise ValueError(f"a profile's source is one of {', '.join(PROFILE_SOURCES)}, got {self.source!r}")


@dataclass
class PredictedLevel:
    """One level as predicted: the sweep's statistics (docs/metrics.md) of a simulation of it."""

    level_id: str
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    tpot_p95_s: float | None
    output_tok_s: float | None
    req_s: float | None = None
    mean_batch: float | None = None  # running requests per engine step, over the window's steps
    preemptions: int = 0
    n_requests: int = 0  # simulated requests sent inside the window
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def metrics(self) -> dict[str, float | None]:
        return {k: getattr(self, k) for k in PREDICTED_METRICS}


@dataclass
class PredictionRecord:
    """prediction.json: the profile, whose machine it describes, the engine simulated, every level."""

    profile: ProfileRef
    scope: str  # this_machine | other_machine | assumed
    levels: list[PredictedLevel]
    engine: dict[str, Any] = field(default_factory=dict)  # tp, pp, max_num_seqs, ... as simulated
    notes: list[str] = field(default_factory=list)  # the simulation's own (extrapolations, defaults)
    created: float = 0.0  # epoch seconds
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.scope not in PROFILE_SCOPES:
            raise ValueError(f"a prediction's scope is one of {', '.join(PROFILE_SCOPES)}, got {self.scope!r}")
        if not isinstance(self.profile, ProfileRef) or not all(isinstance(lv, PredictedLevel) for lv in self.levels):
            raise TypeError("PredictionRecord holds a ProfileRef and PredictedLevels (from_dict reads JSON)")

    def level(self, level_id: str) -> PredictedLevel | None:
        return next((lv for lv in self.levels if lv.level_id == level_id), None)

    def to_dict(self) -> dict[str, Any]:
        return record_to_dict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PredictionRecord":
        """The inverse of to_dict; raises TypeError or ValueError on a record of another shape."""
        if not isinstance(d, dict) or not isinstance(d.get("profile"), dict):
            raise TypeError("a prediction record is a JSON object with a profile")
        levels = [record_from_dict(PredictedLevel, x) for x in d.get("levels") or []]
        return record_from_dict(cls, d, profile=record_from_dict(ProfileRef, d["profile"]), levels=levels)
