"""`python -m refengine.server --tensor-parallel-size 2` on a free loopback port: the world-size-1
streaming test passes; killing a rank mid-stream ends the stream and /health turns 503."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from refengine_proc import free_port
from refengine_proc import start_process as start

from refengine import LLM, SamplingParams

SERVE_ARGS = ["--model", "tiny-test", "--max-model-len", "256", "--num-gpu-blocks-override", "256"]


def rank_pids(server_pid: int) -> list[int]:
    """The spawned ranks among the server's children (not multiprocessing's resource tracker). Each
    thread lists the children it started; the ranks are started by the thread that builds the engine."""
    children = [
        c for task in Path(f"/proc/{server_pid}/task").iterdir() for c in (task / "children").read_text().split()
    ]
    return [int(c) for c in children if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]


def stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


def streaming_matches_offline(url: str) -> None:
    """tests/refengine/server/test_openai_client.py's streaming test, against this server."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=60)
    prompt = "the quick brown fox"
    stream = client.completions.create(
        model="tiny-test",
        prompt=prompt,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    texts, usage, reasons = [], None, []
    for ch in stream:
        usage = ch.usage or usage
        for c in ch.choices:
            texts.append(c.text)
            reasons.append(c.finish_reason)
    offline = LLM(model="tiny-test", max_model_len=256)
    expected = offline.generate([prompt], SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))[0]
    assert "".join(texts) == expected.outputs[0].text
    assert usage.completion_tokens == 12 and usage.prompt_tokens == len(expected.prompt_token_ids)
    assert reasons[-1] == "length" and all(r is None for r in reasons[:-1])


@pytest.mark.slow
def test_tp2_server_streams_then_reports_unhealthy_when_a_rank_dies():
    port = free_port()
    proc, url = start(
        [sys.executable, "-m", "refengine.server", *SERVE_ARGS, "--port", str(port), "--tensor-parallel-size", "2"],
        port,
    )
    try:
        streaming_matches_offline(url)
        (rank1,) = rank_pids(proc.pid)
        with httpx.stream(
            "POST",
            url + "/v1/completions",
            timeout=30,
            json={"prompt": [9] * 10, "max_tokens": 2000, "stream": True, "ignore_eos": True},
        ) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data:")
            os.kill(rank1, signal.SIGKILL)
            t0 = time.monotonic()
            rest = list(lines)  # the stream ends (with an error event or a cut), it does not hang
        assert time.monotonic() - t0 < 10
        assert not any('"finish_reason":"length"' in line for line in rest)
        deadline = time.monotonic() + 5
        while httpx.get(url + "/health", timeout=2).status_code != 503:
            assert time.monotonic() < deadline, "/health did not turn 503"
            time.sleep(0.1)
    finally:
        out = stop(proc)
    assert "rank 1" in out, out[-2000:]


def test_bad_layout_is_one_line_error_before_loading():
    r = subprocess.run(
        [sys.executable, "-m", "refengine.server", *SERVE_ARGS, "--tensor-parallel-size", "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip() == (
        "error: num_attention_heads (4) is not divisible by tensor_parallel_size=3; use a divisor of 4"
    )


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["--tensor-parallel-size", "--pipeline-parallel-size"])
def test_torchrun_two_ranks_serve(tmp_path, layout):
    """The multi-machine launch, on one machine: torchrun starts both ranks, rank 0 serves. Under PP
    the worker resolves `--pipeline-schedule auto` as the driver does (the stages take turns on CPU)."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{free_port()}",
        "-m",
        "refengine.server",
        *SERVE_ARGS,
        "--port",
        str(port),
        layout,
        "2",
    ]
    proc, url = start(cmd, port)
    try:
        streaming_matches_offline(url)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
