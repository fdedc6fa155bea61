"""Collective bandwidth: nccl-tests' definitions, and a real 2-rank gloo run through the CLI."""

import json
import os
import subprocess
import sys

import pytest

from probes.comm_table import bus_factor, make_row, parse_size, plateau, size_steps


def test_bus_factors_follow_nccl_tests():
    assert bus_factor("all_reduce", 8) == 2 * 7 / 8
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bus_factor(op, 4) == 3 / 4
    assert bus_factor("sendrecv", 16) == 1.0
    with pytest.raises(ValueError):
        bus_factor("broadcastz", 2)


def test_row_math_and_stragglers():
    row = make_row("all_reduce", 1 << 20, 1 << 18, "float32", 4, [0.001, 0.001, 0.001, 0.002])
    assert row.time_us == pytest.approx(2000) and row.algbw_gbs == pytest.approx((1 << 20) / 0.002 / 1e9)
    assert row.busbw_gbs == pytest.approx(row.algbw_gbs * 1.5) and row.straggler_rank == 3
    assert make_row("all_reduce", 1024, 256, "float32", 4, [0.001] * 4).straggler_rank is None


def test_sizes_and_plateau():
    assert parse_size("1K") == 1024 and parse_size("64M") == 64 << 20 and parse_size("4096") == 4096
    with pytest.raises(ValueError):
        parse_size("lots")
    assert size_steps(1024, 8192) == [1024, 2048, 4096, 8192]
    rows = [
        make_row("all_reduce", s, s // 4, "float32", 2, [t])
        for s, t in [(1024, 1e-4), (1 << 20, 1e-3), (2 << 20, 2e-3), (4 << 20, 4e-3)]
    ]
    p = plateau(rows)
    assert p["busbw_gbs"] == pytest.approx((2 << 20) / 2e-3 / 1e9) and p["reached_at_bytes"] == 1 << 20


@pytest.mark.slow
def test_llmdiag_comm_two_gloo_ranks(tmp_path):
    out = tmp_path / "comm.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmbench.diag_cli",
            "comm",
            "--nprocs",
            "2",
            "--backend",
            "gloo",
            "--min-bytes",
            "1K",
            "--max-bytes",
            "16K",
            "--step-factor",
            "4",
            "--iters",
            "3",
            "--warmup",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["ranks"] == 2
    ops = {r["op"] for r in data["rows"]}
    assert ops == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "sendrecv"}
    for r in data["rows"]:
        assert r["size_bytes"] in (1024, 4096, 16384) and r["count"] * 4 == r["size_bytes"]
        assert r["algbw_gbs"] == pytest.approx(r["size_bytes"] / (r["time_us"] * 1e-6) / 1e9, rel=1e-9)
        assert r["busbw_gbs"] == pytest.approx(r["algbw_gbs"] * bus_factor(r["op"], 2), rel=1e-9)
        assert len(r["rank_times_us"]) == 2
    # the printed all_reduce table: busbw = algbw × 2(n−1)/n = algbw for n = 2
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("│") and "float32" in ln and "sum" in ln]
    assert len(lines) >= 3
    for ln in lines[:3]:
        cells = [c.strip() for c in ln.strip("│ ").split("│")]
        assert cells[3] == "sum" and cells[5] == cells[6]
    assert "plateau" in proc.stdout


def test_bad_comm_options_are_one_line_errors():
    from typer.testing import CliRunner

    from llmbench.diag_cli import app

    for args in (
        ["--nprocs", "1"],
        ["--ops", "all_reduce,broadcastz"],
        ["--min-bytes", "lots"],
        ["--backend", "mpi"],
        ["--min-bytes", "1M", "--max-bytes", "1K"],
    ):
        res = CliRunner().invoke(app, ["comm", *args])
        assert res.exit_code == 2, (args, res.output)
        assert "error:" in res.output and "Traceback" not in res.output
