"""`llmdiag oom --ramp` sizes its requests from the target's own limits and builds them the way the
sweep does: against a server with max_model_len 512 and 64 KV blocks, the default 1000-token
prompts are shortened to fit, no request is refused, and the capacity matches the server's blocks."""

from __future__ import annotations

import pytest
from refengine_proc import refengine_server
from typer.testing import CliRunner

from llmbench.diag_cli import app


@pytest.mark.slow
def test_ramp_fits_the_servers_max_model_len_and_finds_its_capacity():
    with refengine_server("--num-gpu-blocks-override", "64", "--max-model-len", "512") as (_, url):
        r = CliRunner().invoke(
            app,
            ["oom", "--ramp", "--target", url, "--level-seconds", "2", "--ramp-levels", "1,2,4,8"],
            env={"COLUMNS": "200"},
        )
    out = r.output
    assert r.exit_code == 0, out
    assert "max_model_len is 512: ramp prompts of 503 tokens, not 1000" in out
    assert "errors" in out and "HTTP 400" not in out
    line = next(x for x in out.splitlines() if x.startswith("observed KV capacity:"))
    observed = int(line.split(":")[1].split()[0])
    # 64 blocks of 16 tokens; a request of 503 + 8 tokens takes 32 blocks: 2 at once
    assert observed == 2 and "estimate 2 (server: 64 blocks of 16" in line


def test_a_ramp_whose_requests_are_refused_says_so_instead_of_a_capacity_of_zero():
    with refengine_server("--api-key", "sekrit") as (_, url):
        r = CliRunner().invoke(
            app,
            ["oom", "--ramp", "--target", url, "--api-key", "wrong", "--level-seconds", "1"],
            env={"COLUMNS": "200"},
        )
    assert r.exit_code == 2 and "observed KV capacity" not in r.output
    assert "--api-key" in r.output and "Traceback" not in r.output
