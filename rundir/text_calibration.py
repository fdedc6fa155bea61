"""The text-calibration record: how the server's own token counts fixed the sizing of text prompts
(loadgen/calibration.py), kept with the sizer in run.json's `sweep.workload.text_sizer.extra`
(docs/run-format.md) as the evidence that input lengths are what was asked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from rundir.record_json import record_from_dict, record_to_dict


@dataclass(frozen=True)
class LengthCheck:
    """One prompt of the first level's length, as requested and as the server counted it."""

    requested: int
    counted: int
    relative_error: float  # |counted - requested| / requested, rounded to 4 places
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.requested < 1 or self.counted < 0 or self.relative_error < 0:
            raise ValueError(f"a length check needs requested >= 1, counted >= 0 and an error >= 0, got {self}")


@dataclass(frozen=True)
class UniformPool:
    """The words counted one by one, and how many of them share the commonest count (the pool kept)."""

    probed: int
    kept: int
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.kept <= self.probed:
            raise ValueError(f"a uniform pool keeps at most the words it probed, got {self}")


@dataclass(frozen=True)
class TextCalibration:
    """What the calibration measured; each part is absent when that way was not taken."""

    check: LengthCheck | None = None
    fit_counts: dict[int, int] | None = None  # words in a fitting prompt -> the server's count of it
    uniform_pool: UniformPool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    # Absent rather than null, as the record has always been written.
    OMIT_WHEN_NONE: ClassVar[tuple[str, ...]] = ("check", "fit_counts", "uniform_pool")

    def to_dict(self) -> dict[str, Any]:
        return record_to_dict(self, self.OMIT_WHEN_NONE)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "TextCalibration":
        d = d or {}
        check, fits, pool = d.get("check"), d.get("fit_counts"), d.get("uniform_pool")
        # JSON object keys are strings: the fitting prompts' word counts come back as ints.
        return record_from_dict(
            cls,
            d,
            check=None if check is None else record_from_dict(LengthCheck, check),
            fit_counts=None if fits is None else {int(k): int(v) for k, v in fits.items()},
            uniform_pool=None if pool is None else record_from_dict(UniformPool, pool),
        )
