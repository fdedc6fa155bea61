"""The probe runner: rows on the run's clock, flushed per row, a failing sample does not stop the
series, a probe that cannot run says so once, and its own CPU cost is recorded."""

import json
import time

from probes import registry
from probes.base import Probe, ProbeContext, ProbeUnavailable, read_rows
from probes.runner import ProbeSet


class _Counting(Probe):
    name = "counting"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.n = 0

    def sample(self):
        self.n += 1
        if self.n == 2:
            raise OSError("cannot read /proc/pretend")  # one bad read in the middle
        return {"n": self.n}


class _Never(Probe):
    name = "never"

    def check(self):
        raise ProbeUnavailable("pretend hardware is missing")


def test_rows_errors_unavailable_and_cost(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.PROBES, "counting", f"{__name__}:_Counting")
    monkeypatch.setitem(registry.PROBES, "never", f"{__name__}:_Never")
    logs = []
    pset = ProbeSet(["counting", "never"], ProbeContext(out_dir=tmp_path, interval_s=0.05), log=logs.append)
    t0 = time.time()
    availability = pset.start()
    assert availability == {"counting": "ok", "never": "unavailable: pretend hardware is missing"}
    time.sleep(0.2)
    assert read_rows(tmp_path / "probes" / "counting.jsonl")  # flushed while running
    stats = pset.stop()
    rows = read_rows(tmp_path / "probes" / "counting.jsonl")
    assert [r["n"] for r in rows][:2] == [1, 3]  # the bad read is skipped
    assert all(t0 <= r["t"] <= time.time() for r in rows)
    assert stats["counting"].errors == 1 and stats["counting"].rows == len(rows)
    assert sum("never cannot run here" in m for m in logs) == 1
    assert sum("cannot read /proc/pretend" in m for m in logs) == 1
    assert not (tmp_path / "probes" / "never.jsonl").exists()
    cost = json.loads((tmp_path / "probes" / "_cost.json").read_text())
    assert cost["counting"]["samples"] >= 3 and cost["counting"]["cpu_s"] >= 0


class _SlowFirst(Probe):
    """A first read that takes a while (a scrape, a /proc walk on a busy host)."""

    name = "slow-first"

    def sample(self):
        time.sleep(0.3)
        return {"t": time.time(), "ok": 1}


def test_start_returns_once_every_probe_has_a_row_so_series_begin_before_the_first_request(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.PROBES, "slow-first", f"{__name__}:_SlowFirst")
    monkeypatch.setitem(registry.PROBES, "counting", f"{__name__}:_Counting")
    pset = ProbeSet(["slow-first", "counting", "host"], ProbeContext(out_dir=tmp_path, interval_s=5.0))
    pset.start()
    first_request = time.time()  # what a sweep sends first, right after start()
    try:
        for name in ("slow-first", "counting", "host"):
            rows = read_rows(tmp_path / "probes" / f"{name}.jsonl")
            assert rows and rows[0]["t"] <= first_request, name
    finally:
        pset.stop()


def test_probe_list_parsing():
    assert registry.parse_probe_list("default") == registry.DEFAULT_PROBES
    assert registry.parse_probe_list("host,tcp,host") == ["host", "tcp"]
    assert registry.parse_probe_list("none") == []
    assert set(registry.parse_probe_list("all")) == set(registry.PROBES)
    try:
        registry.parse_probe_list("host,nvlinkz")
    except ValueError as exc:
        assert "unknown probe 'nvlinkz'" in str(exc)
    else:
        raise AssertionError("an unknown probe must be refused")


def test_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"t": 1, "a": 1}\n{"t": 2, "a"')
    assert read_rows(path) == [{"t": 1, "a": 1}]


class _Unreachable(Probe):
    name = "unreachable"

    def sample(self):
        raise OSError("GET /metrics: 404 Not Found")  # llama.cpp's server has no /metrics


def test_a_probe_that_never_read_a_page_is_failed_not_ok(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.PROBES, "unreachable", f"{__name__}:_Unreachable")
    pset = ProbeSet(["unreachable"], ProbeContext(out_dir=tmp_path, interval_s=0.05), log=lambda _m: None)
    assert pset.start() == {"unreachable": "ok"}  # its check could not know
    time.sleep(0.2)
    outcome = pset.outcome(pset.stop())
    assert outcome["unreachable"].startswith("failed: none of its ") and "404 Not Found" in outcome["unreachable"]
