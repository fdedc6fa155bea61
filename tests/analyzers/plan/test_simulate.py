"""The simulator drives refengine's own Scheduler the way the engine does."""

import itertools

import pytest

from analyzers.model.presets import resolve_model
from analyzers.plan.gpu_profiles import published_profile
from analyzers.plan.request_overhead import RequestOverhead
from analyzers.plan.simulate import LoadSpec, Simulator, random_prompt
from analyzers.plan.step_model import StepModel
from refengine.config import CacheConfig, EngineArgs, SchedulerConfig
from refengine.engine import LLMEngine
from refengine.sampling_params import SamplingParams

PROMPTS = [40, 60, 25, 50, 35, 45]
OUTPUTS = [30, 20, 40, 25, 35, 30]


def _lengths(i):
    return random_prompt(PROMPTS[i], 0, i, vocab=4096), OUTPUTS[i]


def _schedule_log(outputs):
    return [([(r.req_id, r.num_tokens) for r in s.requests], sorted(s.preempted_req_ids)) for s in outputs]


def test_same_admission_order_chunks_and_preemptions_as_the_real_engine():
    # A KV cache of 12 blocks of 16 tokens for six requests growing to 55-85 tokens: preemption is forced.
    engine = LLMEngine(
        EngineArgs(
            model="tiny-test",
            max_model_len=128,
            num_gpu_blocks_override=12,
            max_num_batched_tokens=64,
            max_num_seqs=4,
            enable_prefix_caching=False,
        )
    )
    seen = []
    schedule = engine.scheduler.schedule

    def logged():
        out = schedule()
        if not out.is_empty:
            seen.append(out)
        return out

    engine.scheduler.schedule = logged
    for i in range(len(PROMPTS)):
        prompt, n_out = _lengths(i)
        engine.add_request(prompt, SamplingParams(max_tokens=n_out, ignore_eos=True), request_id=str(i))
    while engine.has_unfinished_requests():
        engine.step()
    assert engine.scheduler.num_preemptions_total > 0

    sim = Simulator(
        StepModel(resolve_model("tiny-test"), published_profile("h100")), engine.scheduler_config, engine.cache_config
    )
    trace = []
    result = sim.run(
        LoadSpec(warmup_s=0.0, duration_s=1e-9, arrivals=iter([0.0] * len(PROMPTS))), _lengths, trace=trace
    )
    assert _schedule_log(trace) == _schedule_log(seen)
    assert result.preemptions == engine.scheduler.num_preemptions_total
    assert [r.output_tokens for r in result.records] == OUTPUTS
    assert all(r.t_done is not None for r in result.records)


def _sim(max_num_seqs: int) -> Simulator:
    return Simulator(
        StepModel(resolve_model("llama-3-8b"), published_profile("h100")),
        SchedulerConfig(max_num_seqs=max_num_seqs, max_model_len=4096),
        CacheConfig(num_blocks=20_000),
    )


def test_continuous_batching_serves_more_than_one_at_a_time():
    load = LoadSpec(warmup_s=2.0, duration_s=10.0, concurrency=16)
    batched = _sim(128).run(load, lambda i: (random_prompt(256, 0, i), 64))
    serial = _sim(1).run(
        LoadSpec(warmup_s=2.0, duration_s=10.0, concurrency=16), lambda i: (random_prompt(256, 0, i), 64)
    )
    assert batched.output_tok_s > 4 * serial.output_tok_s
    assert batched.mean_batch > 8 and serial.mean_batch == pytest.approx(1.0)
    ttft = lambda r: sorted(x.ttft_s for x in r.in_window)[len(r.in_window) // 2]
    assert ttft(serial) > 5 * ttft(batched)  # with one seat, fifteen users queue


def test_open_loop_sends_at_the_given_times_and_finishes_the_window():
    times = itertools.count(0.05, 0.1)  # 10 requests/s
    result = _sim(128).run(
        LoadSpec(warmup_s=1.0, duration_s=5.0, arrivals=times), lambda i: (random_prompt(128, 0, i), 32)
    )
    window = result.in_window
    assert len(window) == 50
    assert all(r.t_done is not None and r.ttft_s > 0 for r in window)
    assert result.output_tok_s == pytest.approx(10 * 32, rel=0.1)


def test_a_longer_prompt_waits_longer_before_the_scheduler_sees_it():
    # The request overhead's prompt term: 10 us per token puts a 512-token prompt's first token
    # 384 x 10 us = 3.84 ms later than a 128-token one's on average (uniform draws around the mean),
    # beyond what the longer prefill itself adds without the term.
    def mean_ttft(overhead: RequestOverhead, prompt: int) -> float:
        sim = Simulator(
            StepModel(resolve_model("tiny-test"), published_profile("h100")),
            SchedulerConfig(max_num_seqs=8, max_model_len=1024),
            CacheConfig(num_blocks=2_000),
            overhead,
        )
        times = itertools.count(0.05, 0.05)  # one at a time: nothing queues
        window = sim.run(LoadSpec(1.0, 20.0, arrivals=times), lambda i: (random_prompt(prompt, 0, i), 4)).in_window
        return sum(r.ttft_s for r in window) / len(window)

    plain, per_token = RequestOverhead(1e-3), RequestOverhead(1e-3, per_prompt_token_s=1e-5)
    added = (mean_ttft(per_token, 512) - mean_ttft(per_token, 128)) - (mean_ttft(plain, 512) - mean_ttft(plain, 128))
    assert added == pytest.approx(384 * 1e-5, rel=0.25)


def test_pipeline_parallel_runs_the_batch_queue_and_overlaps_stages():
    shape, profile = resolve_model("llama-3-8b"), published_profile("h100")
    sched, cache = SchedulerConfig(max_num_seqs=128, max_model_len=4096), CacheConfig(num_blocks=20_000)
    load = lambda: LoadSpec(warmup_s=2.0, duration_s=8.0, concurrency=32)
    model = StepModel(shape, profile, pp=2)
    # Long prompts, short answers: compute-bound prefill steps, where keeping both stages busy pays.
    lengths = lambda i: (random_prompt(2048, 0, i), 2)
    queued = Simulator(model, sched, cache, batches_in_flight=2).run(load(), lengths)
    serial = Simulator(model, sched, cache, batches_in_flight=1).run(load(), lengths)
    assert all(r.t_done is not None for r in queued.in_window)
    # Two batches in flight keep both stages busy; one at a time leaves a stage idle while the other works.
    assert queued.output_tok_s > 1.5 * serial.output_tok_s


def test_the_load_keeps_running_after_the_window_until_its_requests_finish():
    """The sweep's drain (docs/metrics.md): a window's last requests are served under the same load as
    its first. Without it (keep_load=False) they would finish on an emptying engine, faster."""
    sim = Simulator(
        StepModel(resolve_model("llama-3-8b"), published_profile("h100")),
        SchedulerConfig(max_num_seqs=128, max_model_len=4096),
        CacheConfig(num_blocks=20_000),
    )
    lengths = lambda i: (random_prompt(1024, 0, i), 64 + (i * 37) % 192)  # requests outlast the short window
    kept, stopped = (
        sim.run(LoadSpec(warmup_s=3.0, duration_s=0.5, concurrency=16, keep_load=keep), lengths)
        for keep in (True, False)
    )
    last_done = max(r.t_done for r in kept.in_window)
    sent_after = [r.t_sent for r in kept.records if r.t_sent >= kept.window[1]]
    assert sent_after and max(sent_after) <= last_done  # sending went on until the window's last request ended
    assert not [r for r in stopped.records if r.t_sent >= stopped.window[1]]
    mean_tpot = lambda res: sum(r.tpot_s for r in res.in_window) / len(res.in_window)
    assert mean_tpot(kept) > 1.1 * mean_tpot(stopped)
