"""The whole engine (scheduler, broadcast of SchedulerOutput, spawned gloo ranks) under TP and PP:
greedy tokens equal to one process; a rank killed mid-request fails the engine within seconds."""

import os
import signal
import time

import pytest
from process_state import ProcessState, assert_unchanged
from rank_kill import kill_a_rank_mid_request

from refengine import LLM, SamplingParams
from refengine.distributed.executor import RankFailedError

KW = dict(max_model_len=128, num_gpu_blocks_override=64, block_size=4, seed=0)


def _prompts():
    return [[5 + i, 17, 42 + 3 * i, 7] * (1 + i % 3) for i in range(5)]


def _tokens(llm):
    sp = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
    return [o.outputs[0].token_ids for o in llm.generate(_prompts(), sp)]


@pytest.fixture(scope="module")
def one_process_tokens(llama_dir):
    return _tokens(LLM(model=llama_dir, **KW))


def test_pp2_engine_matches_one_process_and_reports_bubble(llama_dir, one_process_tokens):
    before = ProcessState.capture()
    llm = LLM(model=llama_dir, pipeline_parallel_size=2, pipeline_micro_batches=2, **KW)
    try:
        assert _tokens(llm) == one_process_tokens
        ex = llm.llm_engine.executor
        stats = ex.collect_stats()
        assert [s["pp_rank"] for s in stats] == [0, 1] and all(s["steps"] == ex.steps for s in stats)
        assert 0.0 <= ex.measured_bubble(stats) < 1.0
    finally:
        llm.llm_engine.shutdown()
    assert_unchanged(before)  # the spawned rank and the watchdog are gone


@pytest.mark.slow
def test_tp2_engine_matches_one_process(llama_dir, one_process_tokens):
    llm = LLM(model=llama_dir, tensor_parallel_size=2, **KW)
    try:
        assert _tokens(llm) == one_process_tokens
    finally:
        llm.llm_engine.shutdown()


@pytest.mark.slow
def test_tp2_pp2_engine_on_four_ranks(llama_dir, one_process_tokens):
    llm = LLM(model=llama_dir, tensor_parallel_size=2, pipeline_parallel_size=2, **KW)
    try:
        assert _tokens(llm) == one_process_tokens
    finally:
        llm.llm_engine.shutdown()


def test_killing_a_rank_mid_request_fails_the_engine_quickly(llama_dir):
    before = ProcessState.capture()
    llm = LLM(model=llama_dir, tensor_parallel_size=2, **KW)
    engine = llm.llm_engine
    try:
        kill_a_rank_mid_request(engine)
        with pytest.raises(RankFailedError):  # and it stays failed
            engine.step()
    finally:
        engine.shutdown()
    assert_unchanged(before)  # a TP engine whose rank died cleans up as well


def test_a_rank_dying_while_idle_is_noticed_without_a_step(llama_dir):
    llm = LLM(model=llama_dir, pipeline_parallel_size=2, **KW)
    engine = llm.llm_engine
    try:
        os.kill(engine.executor.procs[0].pid, signal.SIGKILL)
        deadline = time.monotonic() + 3.0
        while engine.healthy:
            assert time.monotonic() < deadline, "the watchdog did not notice the dead rank"
            time.sleep(0.05)
        assert "rank 1" in engine.executor.dead_reason
        engine.add_request([5, 6, 7], SamplingParams(max_tokens=4))
        with pytest.raises(RankFailedError, match="rank 1"):
            engine.step()
    finally:
        engine.shutdown()
