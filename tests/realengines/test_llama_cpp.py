"""Real llama.cpp (llama-cpp-python's OpenAI-compatible server, `python -m llama_cpp.server`) on
loopback, on a GGUF written here from a refengine checkpoint (tests/realengines/to_gguf.py).

Its quirks are the test: by default it cuts a running stream when a new request arrives (one
empty chunk, `[DONE]`, no finish_reason), its streams carry no usage and not one token per text
chunk, and it has no /metrics. Every figure is held to the server's own accounting: a
non-streamed request's usage, its /extras/tokenize. Installed on first use into its own venv
(a 15-minute compile, once); skipped with the reason when it cannot be."""

from __future__ import annotations

import json
import subprocess

import httpx
import pytest
from engine_venv import EngineUnavailable
from servers import Server, h64_checkpoint, llama_cpp_server, pinned_cli

from analyzers.triage.p99 import diagnose_p99
from rundir import RunDir

pytestmark = pytest.mark.slow  # a compile on first use, then seconds; .ci/run runs them with --runslow
OUT_LEN = 16


def records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]


def sweep(server: Server, out, concurrency: str, *extra: str) -> subprocess.CompletedProcess:
    return pinned_cli(
        "llmbench.cli",
        "sweep",
        "--target",
        server.url,
        "--concurrency",
        concurrency,
        "--input-len",
        "32",
        "--output-len",
        str(OUT_LEN),
        "--warmup",
        "1s",
        "--duration",
        "5s",
        "--out",
        str(out),
        *extra,
    )


def _start(tmp_path_factory, *args: str):
    root = tmp_path_factory.mktemp("llama")
    try:
        with llama_cpp_server(h64_checkpoint(root), root, *args) as server:
            yield server
    except EngineUnavailable as exc:
        pytest.skip(f"llama-cpp-python's server is not available here: {exc}")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """As it ships: a new request interrupts the running one."""
    yield from _start(tmp_path_factory)


@pytest.fixture(scope="module")
def llama_queued(tmp_path_factory):
    """--interrupt_requests False: requests wait for the running one instead."""
    yield from _start(tmp_path_factory, "--interrupt_requests", "False")


def test_the_gguf_tokenizes_as_the_hugging_face_tokenizer_does(llama, tmp_path):
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(h64_checkpoint(tmp_path) / "tokenizer.json"))
    for text in ("The quick brown fox jumps over the lazy dog.", "paged KV, continuous batching: 42 tokens"):
        served = httpx.post(llama.url + "/extras/tokenize", json={"input": text}, timeout=30).json()["tokens"]
        assert served == hf.encode(text).ids, text


def test_token_counts_without_usage_are_the_servers_own(llama_queued, tmp_path):
    """No usage in the stream, text in fewer chunks than tokens: the counts come from the finish
    reason ("length" is max_tokens), the same as a non-streamed request's usage."""
    out = tmp_path / "c1"
    p = sweep(llama_queued, out, "1", "--probes", "server")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ok = [r for r in records(out) if r["status"] == "ok"]
    assert ok
    unstreamed = httpx.post(
        llama_queued.url + "/v1/completions",
        timeout=60,
        json={"model": llama_queued.model, "prompt": "The quick brown fox", "max_tokens": OUT_LEN},
    ).json()
    made = unstreamed["usage"]["completion_tokens"]
    assert unstreamed["choices"][0]["finish_reason"] == "length"
    # "length" is max_tokens, except that llama-cpp-python finishes a multi-byte UTF-8 character
    # its last token began before it stops (docs/metrics.md): then up to 3 more (the text may not
    # show it: bytes that do not complete a character are dropped). More would make the count wrong.
    assert OUT_LEN <= made <= OUT_LEN + 3, unstreamed
    assert all(r["output_tokens_source"] == "length" and r["finish_reason"] == "length" for r in ok)
    summary = json.loads((out / "summary.json").read_text())
    notes = " ".join(n for lv in summary["levels"] for n in lv["notes"])
    assert "shorter" not in notes and "estimate" not in notes, notes
    # TPOT over the real token count: (E2E - TTFT) / 15, not over the chunks that carried text.
    r = ok[0]
    assert r["tpot_s"] == pytest.approx((r["e2e_s"] - r["ttft_s"]) / (OUT_LEN - 1), rel=1e-6)
    # No /metrics page: the server probe failed, and says so once.
    info = RunDir(out).read_info()
    assert info.probes["server"].startswith("failed: every scrape of"), info.probes
    assert "404" in info.probes["server"]


def test_streams_the_server_cuts_are_failures_named_first(llama, tmp_path):
    """Two users against a server that interrupts the running request: nearly every stream is cut.
    They are failures of kind cut_off (not ok, as they were once counted), the level stops with the
    server's behaviour as its reason, and the diagnosis names the cuts, not saturation."""
    out = tmp_path / "c2"
    p = sweep(llama, out, "2", "--probes", "none")
    assert "cut off by the server" in p.stdout and "Traceback" not in p.stdout + p.stderr, p.stdout[-3000:]
    recs = [r for r in records(out) if r["status"] != "cancelled"]
    cut = [r for r in recs if r["error_kind"] == "cut_off"]
    assert len(cut) >= len(recs) // 2, {(r["status"], r["error_kind"]) for r in recs}
    assert all(r["status"] == "error" and r["finish_reason"] is None for r in cut)
    level = json.loads((out / "summary.json").read_text())["levels"][0]
    assert level["slo_met"] is not True, level
    diag = diagnose_p99(RunDir(out))
    assert diag.findings and diag.findings[0].check_id == "p99.failures", [f.title for f in diag.findings]
    assert "cut off by the server" in diag.findings[0].title
    assert "--interrupt_requests False" in diag.findings[0].next_step


def test_the_kv_ramp_says_in_one_line_that_the_server_exports_no_metrics(llama_queued):
    p = pinned_cli(
        "llmbench.diag_cli", "oom", "--ramp", "--target", llama_queued.url, "--ramp-levels", "1", "--level-seconds", "1"
    )
    assert p.returncode == 2, p.stdout + p.stderr
    said = p.stdout + p.stderr
    assert "/metrics answered HTTP 404" in said and "does not export" in said
    assert "Traceback" not in p.stdout + p.stderr and "mozilla" not in p.stdout
