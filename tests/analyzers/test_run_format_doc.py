"""docs/run-format.md says what run.json holds: every field of RunInfo has its row, and every field
of its typed parts is named in that row, so the doc cannot drift from the dataclasses."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from rundir import LevelMeta, RunInfo, SloSpec, SweepInfo, TargetInfo, TraceReplay

DOC = Path(__file__).resolve().parents[2] / "docs" / "run-format.md"
PARTS = {"target": TargetInfo, "slos": SloSpec, "level_meta": LevelMeta}


def _rows() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## run.json (`RunInfo`)", 1)[1].split("\n### ", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)`(?:, `\w+`)* \| (.*)\|$", section, re.M)} | {
        name: m.group(2) for m in re.finditer(r"^\| `(\w+)`, `(\w+)` \| (.*)\|$", section, re.M)
        for name in (m.group(1), m.group(2))}


def _fields(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name != "extra"]


def test_every_run_info_field_has_a_row():
    rows = _rows()
    assert not [f for f in _fields(RunInfo) if f not in rows], sorted(rows)


def test_every_field_of_the_typed_parts_is_named_in_its_row():
    rows = _rows()
    for key, cls in PARTS.items():
        missing = [f for f in _fields(cls) if f'"{f}"' not in rows[key]]
        assert not missing, f"docs/run-format.md's {key} row does not name {missing}"
    missing = [f for f in _fields(TraceReplay) if f'"{f}"' not in rows["level_meta"]]
    assert not missing, f"docs/run-format.md's level_meta row does not name the trace's {missing}"
    assert "SweepInfo" in rows["sweep"] and SweepInfo


def test_level_meta_round_trips_and_keeps_unknown_keys():
    info = RunInfo.from_dict({"run_id": "r", "command": [], "host": {}, "target": {"url": None, "model": None},
                              "level_meta": {"c1": {"window_s": 3.0, "notes": ["x"], "cut_short": True,
                                                    "from_a_newer_tool": 7}}})
    meta = info.level_meta["c1"]
    assert isinstance(meta, LevelMeta) and meta.window_s == 3.0 and meta.cut_short and meta.notes == ["x"]
    again = RunInfo.from_dict(info.to_dict()).level_meta["c1"]
    assert again == meta and again.extra == {"from_a_newer_tool": 7}
    assert info.to_dict()["level_meta"]["c1"]["from_a_newer_tool"] == 7


def _record_rows() -> dict[str, str]:
    """requests.jsonl's table: each field named in a row's first cell -> the row's meaning."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## requests.jsonl (`RequestRecord`)", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for m in re.finditer(r"^\| ([^|]+) \| (.*)\|$", section, re.M):
        for name in re.findall(r"`(\w+)`", m.group(1)):
            rows[name] = m.group(2)
    return rows


def test_every_request_record_field_and_error_kind_is_in_the_doc():
    from rundir import ERROR_KINDS, RequestRecord
    from rundir.records import OUTPUT_TOKEN_SOURCES

    rows = _record_rows()
    assert not [f.name for f in dataclasses.fields(RequestRecord) if f.name not in rows], sorted(rows)
    assert not [k for k in ERROR_KINDS if f"`{k}`" not in rows["error_kind"]]
    assert not [s for s in OUTPUT_TOKEN_SOURCES if f"`{s}`" not in rows["output_tokens_source"]]
