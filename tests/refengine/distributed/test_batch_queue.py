"""The batch queue (vLLM's PP schedule) on 2 spawned gloo ranks: several scheduled batches in the
pipeline at once give the same tokens as one process, with preemption and aborts in flight."""

import pytest
from rank_kill import kill_a_rank_mid_request

from refengine import LLM, SamplingParams

KW = dict(max_model_len=64, block_size=4, seed=0)
N = 14


def _prompts():
    # Varied lengths (4 to 28 tokens), so batches of different requests and sizes overlap.
    return [[5 + i, 17, 42 + 3 * i, 7] * (1 + (i * 3) % 7) for i in range(N)]


def _params():
    greedy = [SamplingParams(max_tokens=2 + (i * 5) % 13, temperature=0, ignore_eos=True) for i in range(N - 2)]
    seeded = [SamplingParams(max_tokens=9, temperature=0.8, seed=100 + i, ignore_eos=True) for i in range(2)]
    return greedy + seeded


def _tokens(llm):
    return [o.outputs[0].token_ids for o in llm.generate(_prompts(), _params())]


def _overlap_recorder(engine):
    """Wraps the executor's submit to record how many batches were in flight at once."""
    ex, seen = engine.executor, [0]
    submit = ex.submit

    def recording(sched):
        pending = submit(sched)
        seen[0] = max(seen[0], len(engine.batch_queue) + (pending is not None))
        return pending

    ex.submit = recording
    return seen


@pytest.fixture(scope="module", params=[64, 24], ids=["roomy-kv", "tight-kv"])
def blocks(request):
    return request.param


def test_batch_queue_matches_one_process(blocks):
    kw = dict(KW, num_gpu_blocks_override=blocks)
    reference_llm = LLM(model="tiny-test", **kw)
    reference = _tokens(reference_llm)
    llm = LLM(model="tiny-test", pipeline_parallel_size=2, pipeline_schedule="batch-queue", **kw)
    engine = llm.llm_engine
    try:
        assert engine.batch_queue is not None and engine.scheduler.max_batches_in_flight == 2
        seen = _overlap_recorder(engine)
        assert _tokens(llm) == reference
        assert seen[0] == 2, "no two batches were ever in flight together"
        if blocks == 24:
            assert engine.scheduler.num_preemptions_total > 0, "the tight KV budget was meant to preempt"
        counts = engine.scheduler.kv_cache_manager.check_integrity()
        assert counts["used"] == 0 and not engine.scheduler.in_flight and len(engine.batch_queue) == 0
        ex = engine.executor
        stats = ex.collect_stats()
        assert all(s["steps"] == ex.steps for s in stats)
        assert 0.0 <= ex.measured_bubble(stats) < 1.0
    finally:
        engine.shutdown()


def test_abort_while_in_flight_and_a_rank_killed_mid_request():
    llm = LLM(
        model="tiny-test", pipeline_parallel_size=2, pipeline_schedule="batch-queue", num_gpu_blocks_override=64, **KW
    )
    engine = llm.llm_engine
    try:
        sp = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
        ids = [engine.add_request(p, sp) for p in _prompts()[:4]]
        engine.step()  # the first batch is in flight
        in_flight = sorted(engine.scheduler.in_flight)
        assert in_flight
        engine.abort_request(in_flight[0])
        while engine.has_unfinished_requests():
            engine.step()
        assert engine.scheduler.kv_cache_manager.check_integrity()["used"] == 0
        assert set(ids) - set(in_flight[:1])

        kill_a_rank_mid_request(engine)
    finally:
        engine.shutdown()


@pytest.mark.slow
def test_batch_queue_tp2_pp2_on_four_ranks():
    kw = dict(KW, num_gpu_blocks_override=24)
    reference = _tokens(LLM(model="tiny-test", **kw))
    llm = LLM(
        model="tiny-test", tensor_parallel_size=2, pipeline_parallel_size=2, pipeline_schedule="batch-queue", **kw
    )
    try:
        assert _tokens(llm) == reference
    finally:
        llm.llm_engine.shutdown()


@pytest.mark.parametrize(
    "schedule, micro_batches, device, expected, depth",
    [
        ("auto", None, "cuda", ("batch-queue", None), 2),
        ("auto", None, "cpu", ("micro-batch", 1), 1),  # the stages take turns on a host's shared cores
        ("auto", 4, "cpu", ("micro-batch", 4), 1),
        ("auto", 4, "cuda", ("micro-batch", 4), 1),
        ("micro-batch", None, "cpu", ("micro-batch", None), 1),
        ("batch-queue", None, "cpu", ("batch-queue", None), 2),
    ],
)
def test_pipeline_schedule_resolution(schedule, micro_batches, device, expected, depth):
    from refengine.config import EngineArgs
    from refengine.parallel.layout import ParallelConfig

    args = EngineArgs(pipeline_parallel_size=2, pipeline_schedule=schedule, pipeline_micro_batches=micro_batches)
    pc = ParallelConfig.from_engine_args(args, device)
    assert (pc.schedule, pc.micro_batches) == expected
    assert pc.batches_in_flight == depth


def test_the_default_pipeline_on_cpu_takes_turns_and_matches_one_process():
    """`auto` on this CPU host: one batch at a time through both stages, greedy tokens as one process's."""
    kw = dict(KW, num_gpu_blocks_override=64)
    reference = _tokens(LLM(model="tiny-test", **kw))
    llm = LLM(model="tiny-test", pipeline_parallel_size=2, **kw)
    try:
        pc = llm.llm_engine.parallel_config
        assert (pc.schedule, pc.num_micro_batches, pc.batches_in_flight) == ("micro-batch", 1, 1)
        assert llm.llm_engine.batch_queue is None
        assert _tokens(llm) == reference
    finally:
        llm.llm_engine.shutdown()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(pipeline_schedule="batch-queue", pipeline_micro_batches=2), "drop one of the two"),
        (dict(pipeline_schedule="1f1b"), "pipeline_schedule must be one of"),
    ],
)
def test_bad_pipeline_schedule_is_a_user_error(kwargs, message):
    from refengine.errors import RefEngineError

    with pytest.raises(RefEngineError, match=message):
        LLM(model="tiny-test", pipeline_parallel_size=2, **kwargs)
