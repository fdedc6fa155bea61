"""docs/run-format.md says what run.json holds: every field of RunInfo has its row, and every field
of its typed parts is named in that row, so the doc cannot drift from the dataclasses."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from rundir import LevelMeta, RunInfo, SloSpec, SweepInfo, TargetInfo, TraceReplay, WorkloadSpec
from rundir.capacity import CapacityAnswer, CapacityProbe, CapacityRecord, CapacitySearch, LoadVerdict
from rundir.prediction import PROFILE_SCOPES, PredictedLevel, PredictionRecord, ProfileRef
from rundir.text_calibration import LengthCheck, TextCalibration, UniformPool
from rundir.workload_spec import PROMPT_FORMATS, RECORDED, WORKLOAD_KINDS

DOC = Path(__file__).resolve().parents[2] / "docs" / "run-format.md"
# run.json's row -> the records whose fields it names (the sweep row: its workload and the text
# sizer's calibration too)
PARTS = {
    "target": [TargetInfo],
    "slos": [SloSpec],
    "level_meta": [LevelMeta],
    "sweep": [SweepInfo, WorkloadSpec, TextCalibration, LengthCheck, UniformPool],
}
CAPACITY_RECORDS = [CapacityRecord, CapacitySearch, CapacityProbe, CapacityAnswer, LoadVerdict]


def _rows() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## run.json (`RunInfo`)", 1)[1].split("\n### ", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)`(?:, `\w+`)* \| (.*)\|$", section, re.M)} | {
        name: m.group(2)
        for m in re.finditer(r"^\| `(\w+)`, `(\w+)` \| (.*)\|$", section, re.M)
        for name in (m.group(1), m.group(2))
    }


def _fields(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name not in ("extra", RECORDED)]


def test_every_run_info_field_has_a_row():
    rows = _rows()
    assert not [f for f in _fields(RunInfo) if f not in rows], sorted(rows)


def test_every_field_of_the_typed_parts_is_named_in_its_row():
    rows = _rows()
    for key, classes in PARTS.items():
        for cls in classes:
            missing = [f for f in _fields(cls) if f'"{f}"' not in rows[key]]
            assert not missing, f"docs/run-format.md's {key} row does not name {cls.__name__}'s {missing}"
            assert cls.__name__ in rows[key]
    missing = [f for f in _fields(TraceReplay) if f'"{f}"' not in rows["level_meta"]]
    assert not missing, f"docs/run-format.md's level_meta row does not name the trace's {missing}"
    unnamed = [k for k in WORKLOAD_KINDS + PROMPT_FORMATS if f"`{k}`" not in rows["sweep"]]
    assert not unnamed, f"docs/run-format.md's sweep row does not name the workload kinds or formats {unnamed}"


def test_every_field_of_the_capacity_record_is_named_in_its_section():
    text = DOC.read_text(encoding="utf-8")
    section = text.split("### `sweep.capacity` and capacity.json", 1)[1].split("\n## ", 1)[0]
    for cls in CAPACITY_RECORDS:
        missing = [f for f in _fields(cls) if f'"{f}"' not in section]
        assert not missing and cls.__name__ in section, f"the capacity section does not name {cls.__name__}'s {missing}"


def test_the_capacity_and_calibration_records_round_trip_and_keep_unknown_keys():
    answer = {
        "axis": "rate",
        "capacity": 4.0,
        "low": 2.0,
        "high": 4.0,
        "lowest_out": 8.0,
        "bounded_by": "slo",
        "goodput_req_s": 3.9,
        "output_tok_s": 250.0,
        "confidence": 0.95,
        "trace_rate": None,
        "headline": "max rate within SLO: 4 req/s",
        "from_a_newer_tool": 1,
        "loads": [
            {
                "load": 4.0,
                "level_ids": ["r4"],
                "verdict": "in",
                "point_met": True,
                "n": 400,
                "ttft_p99_s": 0.2,
                "ttft_p99_ci": [0.1, 0.3],
                "tpot_p95_s": 0.01,
                "tpot_p95_ci": None,
                "goodput_req_s": 3.9,
                "output_tok_s": 250.0,
                "new_column": "x",
            }
        ],
    }
    sizer = {
        "words": ["a", "b"],
        "extra": {
            "check": {"requested": 64, "counted": 65, "relative_error": 0.0156},
            "fit_counts": {"64": 70, "128": 135},
            "later": True,
        },
    }
    sweep = {
        "concurrency": [1],
        "workload": {"kind": "random", "text_sizer": sizer},
        "stop_over_capacity": False,
        "capacity": {
            "search": {"axis": "rate", "start": 2.0},
            "probes": [{"level_id": "r4", "load": 4.0, "phase": "bracket", "met": True}],
            "answer": answer,
        },
    }
    info = RunInfo.from_dict(
        {"run_id": "r", "command": [], "host": {}, "target": {"url": None, "model": None}, "sweep": sweep}
    )
    record = info.sweep.capacity
    assert isinstance(record, CapacityRecord) and not info.sweep.stop_over_capacity
    assert record.search == CapacitySearch(axis="rate", start=2.0) and record.probes[0].met is True
    assert record.answer.capacity == 4.0 and record.answer.extra == {"from_a_newer_tool": 1}
    assert record.answer.loads[0].extra == {"new_column": "x"} and record.answer.loads[0].too_few is False
    again = RunInfo.from_dict(info.to_dict())
    assert again.sweep.capacity == record and again.to_dict()["sweep"]["capacity"]["answer"]["from_a_newer_tool"] == 1
    calibration = TextCalibration.from_dict(again.sweep.workload.text_sizer["extra"])
    assert calibration.check == LengthCheck(64, 65, 0.0156) and calibration.fit_counts == {64: 70, 128: 135}
    assert calibration.uniform_pool is None and calibration.extra == {"later": True}
    assert "uniform_pool" not in calibration.to_dict() and calibration.to_dict()["check"]["counted"] == 65
    assert "capacity" not in SweepInfo().to_dict()  # absent, as before the field existed


def test_level_meta_round_trips_and_keeps_unknown_keys():
    info = RunInfo.from_dict(
        {
            "run_id": "r",
            "command": [],
            "host": {},
            "target": {"url": None, "model": None},
            "level_meta": {"c1": {"window_s": 3.0, "notes": ["x"], "cut_short": True, "from_a_newer_tool": 7}},
        }
    )
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


PREDICTION_RECORDS = [PredictionRecord, ProfileRef, PredictedLevel]


def test_every_field_of_the_prediction_record_is_named_in_its_section():
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## prediction.json (`PredictionRecord`)", 1)[1].split("\n## ", 1)[0]
    for cls in PREDICTION_RECORDS:
        missing = [f for f in _fields(cls) if f'"{f}"' not in section]
        assert not missing and cls.__name__ in section, (
            f"the prediction section does not name {cls.__name__}'s {missing}"
        )
    assert all(f"`{s}`" in section for s in PROFILE_SCOPES)


def test_the_prediction_record_round_trips_and_keeps_unknown_keys(tmp_path):
    from rundir import RunDir

    d = {
        "profile": {"name": "laptop", "source": "measured", "host": "box", "later": 1},
        "scope": "this_machine",
        "levels": [
            {
                "level_id": "c1",
                "ttft_p50_s": 0.01,
                "ttft_p99_s": 0.02,
                "tpot_p50_s": 0.003,
                "tpot_p95_s": 0.004,
                "output_tok_s": 300.0,
                "new_column": "x",
            }
        ],
        "from_a_newer_tool": True,
    }
    record = PredictionRecord.from_dict(d)
    assert record.profile.extra == {"later": 1} and record.levels[0].extra == {"new_column": "x"}
    assert record.level("c1").metrics()["output_tok_s"] == 300.0 and record.level("c4") is None
    run = RunDir(tmp_path)
    assert run.read_prediction() is None
    run.write_prediction(record)
    again = run.read_prediction()
    assert again == record and again.to_dict()["from_a_newer_tool"] is True
    run.prediction_json.write_text('{"profile": {"name": "x", "source": "guessed"}, "scope": "this_machine"}')
    assert run.read_prediction() is None  # another shape: no prediction, never a wrong one
