"""Probe files read back: nested fields flattened, text kept apart, torn or missing files harmless."""

import json

import numpy as np

from analyzers.probe_series import flatten, read_probe, read_probes
from rundir import RunDir


def test_flatten_nested_dicts_and_lists():
    assert flatten({"a": 1, "gpus": [{"util": 5}, {"util": 7}], "cpu": {"0": {"user": 1.5}}}) == {
        "a": 1,
        "gpus.0.util": 5,
        "gpus.1.util": 7,
        "cpu.0.user": 1.5,
    }


def test_read_probe_numeric_text_gaps_and_torn_line(tmp_path):
    p = tmp_path / "probes" / "custom.jsonl"
    p.parent.mkdir()
    rows = [
        {"t": 2.0, "x": 3, "per": {"a": 1.0}, "state": "ok"},
        {"t": 1.0, "x": 1, "state": "busy"},
        {"t": 3.0, "x": None, "per": {"a": 2.0}, "state": "ok"},
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows) + '\n{"t": 4.0, "x"')
    s = read_probe(p)
    assert s.name == "custom" and list(s.t) == [1.0, 2.0, 3.0]  # sorted by time
    assert np.array_equal(s.numeric["x"], [1.0, 3.0, np.nan], equal_nan=True)
    assert np.array_equal(s.numeric["per.a"], [np.nan, 1.0, 2.0], equal_nan=True)
    assert s.text == {"state": ["busy", "ok"]}


def test_missing_or_empty_probes_are_no_series(tmp_path):
    assert read_probe(tmp_path / "nope.jsonl") is None
    run = RunDir(tmp_path / "run")
    assert read_probes(run) == []  # no probes/ folder at all
    (run.path / "probes").mkdir(parents=True)
    (run.path / "probes" / "empty.jsonl").write_text("")
    assert read_probes(run) == []
