"""A typed record to and from run.json's JSON, keeping the keys this version does not know.

Every record of run.json (TargetInfo, SweepInfo, LevelMeta, the capacity record, ...) is a
dataclass with an `extra` field: keys it does not know (a newer tool's, or a field since removed)
are kept there on reading and written back at the same level, so reading and rewriting a run.json
never loses what was there (docs/run-format.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")

EXTRA = "extra"


def split_known(cls: type, d: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the keys that are fields of `cls`, the others)."""
    names = {f.name for f in dataclasses.fields(cls)} - {EXTRA}
    return {k: v for k, v in d.items() if k in names}, {k: v for k, v in d.items() if k not in names}


def record_from_dict(cls: type[T], d: Mapping[str, Any] | None, **converted: Any) -> T:
    """`cls` from its JSON object: the known keys as fields (`converted` replaces those already
    turned into typed values), the unknown ones in `extra`. Raises TypeError when a field without
    a default is missing, and whatever the record's own checks raise."""
    known, unknown = split_known(cls, dict(d or {}))
    return cls(**{**known, **converted, EXTRA: unknown})


def record_to_dict(obj: Any, omit_when_none: tuple[str, ...] = ()) -> dict[str, Any]:
    """A record as plain JSON values, its `extra` keys back beside its fields (nested records too);
    a field named in `omit_when_none` is left out while it is None (the key stays absent, as
    before it existed)."""
    d = {
        f.name: plain(getattr(obj, f.name))
        for f in dataclasses.fields(obj)
        if f.name != EXTRA and not (f.name in omit_when_none and getattr(obj, f.name) is None)
    }
    return {**plain(getattr(obj, EXTRA, {})), **d}


def plain(value: Any) -> Any:
    """Plain JSON values, copied: records as record_to_dict writes them (their own `to_dict`)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        to_dict = getattr(value, "to_dict", None)
        return to_dict() if callable(to_dict) else record_to_dict(value)
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
