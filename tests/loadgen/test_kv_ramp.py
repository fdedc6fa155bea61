"""`llmdiag oom --ramp` against a real refengine server on a free loopback port, its KV budget set
small: the capacity it observes must be within 10% of the block-math estimate."""

from __future__ import annotations

import pytest
from refengine_proc import free_port, refengine_server
from typer.testing import CliRunner

from llmbench.diag_cli import app
from llmbench.sweep.target_facts import server_gauges
from loadgen.kv_ramp.spec import RampError, RampSpec

# tiny-test KV on CPU (float32): 2 x 2 layers x 2 KV heads x 16 dims x 4 B = 512 B per token; blocks
# of 128 tokens = 64 KiB. 24 blocks; each request is 80 + 40 = 120 tokens = one block, so the
# estimate is 24 concurrent requests and a request never grows into a second block.
BLOCK_SIZE, NUM_BLOCKS = 128, 24
KV_BYTES = NUM_BLOCKS * BLOCK_SIZE * 512


@pytest.fixture(scope="module")
def small_kv_server():
    with refengine_server(
        "--max-model-len", "256", "--block-size", str(BLOCK_SIZE), "--kv-cache-memory-bytes", str(KV_BYTES)
    ) as (_, url):
        yield url


@pytest.mark.slow  # ~10 s; .ci/run runs it (the default suite keeps under 10 minutes)
def test_ramp_finds_the_kv_capacity_within_10_percent(small_kv_server):
    r = CliRunner().invoke(
        app,
        [
            "oom",
            "--ramp",
            "--target",
            small_kv_server,
            "--ramp-prompt-tokens",
            "80",
            "--ramp-max-tokens",
            "40",
            "--ramp-levels",
            "1,4,16,32,48",
            "--level-seconds",
            "2.5",
        ],
        env={"COLUMNS": "200"},
    )
    assert r.exit_code == 0, r.output
    out = r.output
    assert f"estimate 24 (server: {NUM_BLOCKS} blocks of {BLOCK_SIZE}; 1 blocks per request)" in out
    line = next(x for x in out.splitlines() if x.startswith("observed KV capacity:"))
    observed = int(line.split(":")[1].split()[0])
    assert abs(observed - 24) <= 2.4, out
    assert "saturated at concurrency " in out and "KV" in out
    ramp_row = next(x for x in out.splitlines() if "oom.ramp" in x)
    assert "passed" in ramp_row
    conc_row = next(x for x in out.splitlines() if "oom.concurrency-1" in x)
    assert "passed" in conc_row


def test_parse_metrics_reads_vllm_v0_and_v1_names():
    v1 = (
        'vllm:num_requests_running{model_name="m"} 3.0\nvllm:num_requests_waiting{model_name="m"} 1.0\n'
        'vllm:kv_cache_usage_perc{model_name="m"} 0.5\n# TYPE vllm:num_preemptions counter\n'
        'vllm:num_preemptions_total{model_name="m"} 7.0\n'
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="2000"} 1.0\n'
    )
    m = server_gauges(v1)
    assert (m.running, m.waiting, m.kv_usage, m.preemptions) == (3, 1, 0.5, 7)
    assert m.cache_config["num_gpu_blocks"] == "2000"
    v0 = (
        'vllm:num_requests_running{model_name="a"} 2.0\nvllm:num_requests_running{model_name="b"} 4.0\n'
        'vllm:gpu_cache_usage_perc{model_name="a"} 0.25\n'
    )
    m = server_gauges(v0)
    assert m.running == 6 and m.kv_usage == 0.25 and m.cache_config == {}


def test_ramp_spec_rejects_bad_input():
    with pytest.raises(RampError, match="--target must be a URL"):
        RampSpec(target="127.0.0.1:8000")
    with pytest.raises(RampError, match="increasing"):
        RampSpec(target="http://127.0.0.1:1", levels=(4, 2))


def test_unreachable_target_is_a_clean_error():
    r = CliRunner().invoke(app, ["oom", "--ramp", "--target", f"http://127.0.0.1:{free_port()}"])
    assert r.exit_code == 2 and "could not connect" in r.output and "Traceback" not in r.output


def test_capacity_is_read_from_the_held_back_samples():
    from loadgen.kv_ramp.observation import LevelObservation, Sample
    from loadgen.kv_ramp.result import RampResult

    def level(conc, pairs, preemptions=0.0, kv=0.95):
        lv = LevelObservation(conc, ok=10, preemptions=preemptions)
        lv.samples = [Sample(float(i), r, w, kv, preemptions) for i, (r, w) in enumerate(pairs)]
        return lv

    spec = RampSpec(target="http://127.0.0.1:1", prompt_tokens=100, max_tokens=20)  # 120 tokens: 8 blocks of 16
    calm = level(8, [(8, 0)] * 5, kv=0.4)
    # No preemption: the most it held while others waited (dips are requests finishing between steps).
    admitted = level(32, [(24, 8), (20, 8), (24, 8), (23, 2)])
    r = RampResult(spec, num_blocks=192, block_size=16, levels=[calm, admitted], stop_reason="")
    assert calm.saturation() == [] and r.saturated_level is admitted
    assert (r.observed_capacity, r.estimate, r.within_tolerance(), r.kv_limited) == (24, 24, True, True)
    # Preemption: admitted on prompt blocks, cut back as requests grow; the median of the oscillation.
    storm = level(32, [(28, 4), (24, 8), (24, 8), (25, 7), (24, 8)], preemptions=12)
    r = RampResult(spec, num_blocks=192, block_size=16, levels=[calm, storm], stop_reason="")
    assert r.observed_capacity == 24 and "12 preemptions" in storm.saturation()[0]
    # Waiting with the KV cache half empty: something else (max_num_seqs) caps concurrency.
    capped = level(32, [(16, 16)] * 4, kv=0.5)
    r = RampResult(spec, num_blocks=192, block_size=16, levels=[capped], stop_reason="")
    assert "max_num_seqs" in capped.saturation()[0] and not r.kv_limited


def test_a_cache_too_full_for_one_more_request_is_kv_limited_however_far_from_100_percent():
    """vLLM with 16 blocks of 128 and requests of 8 blocks: one runs (8 of the 15 usable blocks,
    53%), the next waits for KV, and vLLM v1's null block makes the estimate 15 // 8 = 1, not 2."""
    from loadgen.kv_ramp.observation import LevelObservation, Sample
    from loadgen.kv_ramp.result import RampResult

    spec = RampSpec(target="http://127.0.0.1:1", prompt_tokens=1000, max_tokens=8)
    held = LevelObservation(2, ok=20)
    held.samples = [Sample(float(i), 1, 1, 0.533, 0.0) for i in range(10)]
    assert held.next_request_fits is False
    assert "smaller than one more request needs" in held.saturation()[0]
    vllm = RampResult(spec, num_blocks=16, block_size=128, levels=[held], stop_reason="", engine="vllm")
    assert (vllm.usable_blocks, vllm.estimate, vllm.observed_capacity, vllm.kv_limited) == (15, 1, 1, True)
    # refengine reports the blocks a request can have: no reservation.
    own = RampResult(spec, num_blocks=16, block_size=128, levels=[held], stop_reason="", engine="refengine")
    assert (own.usable_blocks, own.estimate) == (16, 2)
    # Four running at 20% with others waiting: the free 80% holds more; something else caps it.
    capped = LevelObservation(8, ok=20)
    capped.samples = [Sample(float(i), 4, 4, 0.2, 0.0) for i in range(10)]
    assert capped.next_request_fits is True and "max_num_seqs" in capped.saturation()[0]


def test_scrapes_that_all_fell_between_requests_are_kv_limited_by_the_servers_count():
    """The same server on a fast host: each 1,000-token request lives a few steps, and the level's
    scrapes with requests waiting all fell between two of them (nothing running, the cache empty).
    The gauges cannot say whether one more fits; the published cache (15 usable blocks, 8 a request)
    says one runs at a time, so the level is KV-limited and says why; with room in the count it is not."""
    from loadgen.kv_ramp.observation import LevelObservation, Sample
    from loadgen.kv_ramp.result import RampResult

    spec = RampSpec(target="http://127.0.0.1:1", prompt_tokens=1000, max_tokens=8)
    blind = LevelObservation(2, ok=20)
    blind.samples = [Sample(float(i), 0, 1, 0.0, 0.0) for i in range(10)]
    assert blind.next_request_fits is None
    assert "max_num_seqs" in blind.saturation()[0]  # the gauges alone
    vllm = RampResult(spec, num_blocks=16, block_size=128, levels=[blind], stop_reason="", engine="vllm")
    assert vllm.estimate == 1 and vllm.kv_limited
    assert "smaller than one more request needs (the server's cache holds 1 at once)" in blind.saturation(1)[0]
    roomy = RampResult(spec, num_blocks=64, block_size=128, levels=[blind], stop_reason="", engine="vllm")
    assert roomy.estimate == 7 and not roomy.kv_limited and "max_num_seqs" in blind.saturation(7)[0]
