"""A real foreign server in the suite: `transformers serve --continuous-batching` (transformers'
own OpenAI-compatible server, from `transformers[serving]`) on a small random checkpoint written
here. It takes string prompts only, refuses `ignore_eos` ("Unexpected fields"), ignores
`stream_options` and ends its streams without `data: [DONE]`; the sweep must measure it anyway."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from refengine_proc import start_process
from test_foreign_servers import SHORT, records, sweep

from rundir import RunDir
from rundir.ports import free_port

pytest.importorskip("fastapi", reason="transformers serve needs transformers[serving]")


def _serve_cmd() -> list[str]:
    exe = shutil.which("transformers", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("the `transformers` command is not installed")
    return [exe, "serve"]


@pytest.fixture(scope="module")
def transformers_server(tmp_path_factory):
    from refengine.model.tiny import resolve_model

    model_dir = tmp_path_factory.mktemp("ckpt") / "tiny-test"
    shutil.copytree(resolve_model("tiny-test"), model_dir)  # a random Llama checkpoint with its tokenizer
    port = free_port()
    proc, url = start_process(
        [
            *_serve_cmd(),
            str(model_dir),
            "--continuous-batching",
            "--device",
            "cpu",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        port,
        quiet=True,
    )
    yield url, str(model_dir)
    proc.kill()
    proc.wait()


@pytest.mark.slow  # ~30 s with start-up; .ci/run runs it (--runslow)
def test_transformers_serve_is_measured_with_no_failed_request(transformers_server, tmp_path):
    url, model = transformers_server
    out = tmp_path / "tfs"
    p = sweep(
        "--target",
        url,
        "--concurrency",
        "1,3",
        "--input-len",
        "48",
        "--output-len",
        "12",
        "--out",
        str(out),
        *SHORT,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    recs = [r for r in records(out) if r["status"] != "cancelled"]
    assert recs and all(r["status"] == "ok" for r in recs), {r["error"] for r in recs}
    info = RunDir(out).read_info()
    assert info.target.model == model  # the one model /v1/models lists
    assert any(a["field"] == "ignore_eos" and a["action"] == "dropped" for a in info.target.adaptations)
    assert all(abs(r["prompt_tokens"] - 48) <= 2 for r in recs)  # sized by the server's own count
    assert all(1 <= r["completion_tokens"] <= 12 for r in recs)  # the model may stop at EOS now
    summary = json.loads((out / "summary.json").read_text())
    assert {lv["level_id"] for lv in summary["levels"]} >= {"c1-in48-out12", "c3-in48-out12"}
