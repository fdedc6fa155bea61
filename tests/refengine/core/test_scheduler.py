"""Scheduler behaviour without a model: the runner is simulated by core_sim.step()."""

import pytest
from core_sim import (
    FakeClock,
    assert_all_blocks_free,
    make_request,
    make_scheduler,
    run_to_completion,
    runner_output,
    step,
)

from refengine.core import kv_cache_manager as kvm
from refengine.core.outputs import ModelRunnerOutput
from refengine.errors import RefEngineError
from refengine.request import RequestStatus


def scheduled(out):
    return {sr.req_id: sr.num_tokens for sr in out.requests}


# ---- budget, chunking, limits -----------------------------------------------------------------


def test_token_budget_is_respected_every_step():
    s = make_scheduler(max_num_batched_tokens=16, num_blocks=128)
    for i in range(8):
        s.add_request(make_request(f"r{i}", 5 + 3 * i, max_tokens=6, start=100 * i))
    outs = run_to_completion(s)
    assert all(o.total_num_scheduled_tokens <= 16 for o in outs)
    assert max(o.total_num_scheduled_tokens for o in outs) == 16
    assert_all_blocks_free(s)


def test_chunked_prefill_splits_a_long_prompt():
    s = make_scheduler(max_num_batched_tokens=16)
    s.add_request(make_request("a", 40, max_tokens=2))
    outs = [step(s)[0] for _ in range(4)]
    assert [o.requests[0].num_tokens for o in outs] == [16, 16, 8, 1]
    assert [o.requests[0].start_pos for o in outs] == [0, 16, 32, 40]
    assert [o.requests[0].sample for o in outs] == [False, False, True, True]
    assert not s.has_unfinished_requests()


def test_long_prefill_cap_limits_each_chunk():
    s = make_scheduler(max_num_batched_tokens=32, long_prefill_token_threshold=6)
    s.add_request(make_request("long", 20, max_tokens=1))
    s.add_request(make_request("short", 3, max_tokens=1, start=500))
    out, _ = step(s)
    assert scheduled(out) == {"long": 6, "short": 3}
    chunks = [6] + [step(s)[0].requests[0].num_tokens for _ in range(3)]
    assert chunks == [6, 6, 6, 2]


def test_chunked_prefill_off_schedules_prompts_whole():
    s = make_scheduler(
        enable_chunked_prefill=False, max_num_batched_tokens=64, max_model_len=64, long_prefill_token_threshold=8
    )
    s.add_request(make_request("a", 40, max_tokens=3))
    s.add_request(make_request("b", 40, max_tokens=3, start=500))
    out, _ = step(s)
    assert scheduled(out) == {"a": 40}, "b does not fit whole in the 24 tokens left"
    out, _ = step(s)
    assert scheduled(out) == {"a": 1, "b": 40}
    run_to_completion(s)
    assert_all_blocks_free(s)


def test_max_num_seqs_caps_the_running_batch():
    s = make_scheduler(max_num_seqs=2)
    for i in range(5):
        s.add_request(make_request(f"r{i}", 4, max_tokens=3, start=10 * i))
    out, _ = step(s)
    assert len(out.requests) == 2 and s.num_running == 2 and s.num_waiting == 3
    outs = run_to_completion(s)
    assert all(len(o.requests) <= 2 for o in outs)


# ---- preemption ---------------------------------------------------------------------------


def preemption_setup(policy, first_prompt, second_prompt, first_priority=0, second_priority=0):
    """8 blocks of 4 tokens: `a` runs alone a step, then `b` is admitted and fills the cache."""
    s = make_scheduler(policy=policy, num_blocks=8, max_model_len=32, max_num_batched_tokens=32)
    a = make_request("a", first_prompt, max_tokens=10, priority=first_priority)
    b = make_request("b", second_prompt, max_tokens=10, priority=second_priority, start=500, arrival=1.0)
    s.add_request(a)
    step(s)
    s.add_request(b)
    out, _ = step(s)
    assert set(scheduled(out)) == {"a", "b"} and s.kv_cache_manager.get_num_free_blocks() == 0
    return s, a, b


@pytest.mark.parametrize("policy", ["fcfs", "sjf"])
@pytest.mark.parametrize("prompts", [(15, 16), (15, 13)], ids=["newer-is-longer", "newer-is-shorter"])
def test_preemption_victim_is_the_most_recently_admitted(policy, prompts):
    s, a, b = preemption_setup(policy, *prompts)
    out, _ = step(s)  # a needs a fifth block; b is the victim
    assert scheduled(out) == {"a": 1} and out.preempted_req_ids == {"b"}
    assert b.status == RequestStatus.PREEMPTED and b.num_computed_tokens == 0 and b.num_preemptions == 1
    assert s.stats().num_preemptions_total == 1 and list(s.waiting)[0] is b
    assert s.kv_cache_manager.get_block_ids(b) == []


def test_priority_preempts_the_worst_priority_even_if_already_scheduled():
    s, a, b = preemption_setup("priority", 14, 16, first_priority=2, second_priority=0)
    out, _ = step(s)  # a fits without growing and is scheduled; b must grow; a is the worst
    assert scheduled(out) == {"b": 1} and out.preempted_req_ids == {"a"}
    assert a.status == RequestStatus.PREEMPTED and out.total_num_scheduled_tokens == 1


def test_priority_victim_itself_stops_the_running_loop():
    s, a, b = preemption_setup("priority", 15, 16, first_priority=1, second_priority=0)
    out, _ = step(s)  # a needs a block and is the worst: it preempts itself
    assert out.preempted_req_ids == {"a"} and scheduled(out) == {}
    out, _ = step(s)
    assert scheduled(out) == {"b": 1}, "b grows into a's blocks; a waits for room"


def test_priority_ties_do_not_livelock():
    # Equal (priority, arrival): picking the older of the two as victim made them preempt
    # each other forever; the newest of equals is the victim, as under fcfs.
    s = make_scheduler(
        policy="priority",
        block_size=1,
        num_blocks=23,
        max_model_len=19,
        max_num_batched_tokens=6,
        max_num_seqs=2,
        long_prefill_token_threshold=3,
        enable_prefix_caching=False,
    )
    s.add_request(make_request("a", 15, max_tokens=1))
    s.add_request(make_request("b", 18, max_tokens=1, start=500))
    run_to_completion(s, max_steps=200)
    assert_all_blocks_free(s)


def test_resumed_request_gets_prefix_hits_and_right_output_count():
    s, a, b = preemption_setup("fcfs", 15, 16)
    a.sampling_params.max_tokens = 3
    out, _ = step(s)  # b preempted; a finishes with its third token
    assert out.preempted_req_ids == {"b"} and a.is_finished()
    out, _ = step(s)
    (resumed,) = out.requests
    # b's first three full blocks survived in the cache (the fourth was evicted for a).
    assert b.num_cached_tokens == 12 and resumed.start_pos == 12
    assert resumed.token_ids == b.all_token_ids[12:17] and resumed.sample  # prompt 16 + 1 output
    run_to_completion(s)
    assert b.num_output_tokens == 10 and b.status == RequestStatus.FINISHED_LENGTH
    assert s.stats().prefix_cache_hits >= 12
    assert_all_blocks_free(s)


@pytest.mark.parametrize("policy", ["fcfs", "priority", "sjf"])
@pytest.mark.parametrize("chunked", [True, False])
def test_kv_exhaustion_with_many_requests_finishes_everything(policy, chunked):
    s = make_scheduler(
        policy=policy,
        num_blocks=10,
        max_model_len=40,
        max_num_batched_tokens=40,
        enable_chunked_prefill=chunked,
        watermark=0.1,
    )
    reqs = [
        make_request(
            f"r{i}",
            3 + (7 * i) % 20,
            max_tokens=4 + (5 * i) % 12,
            start=(i % 3) * 1000,
            priority=i % 3,
            arrival=float(i),
        )
        for i in range(30)
    ]
    for r in reqs:
        s.add_request(r)
    run_to_completion(s, max_steps=5000)
    assert all(r.is_finished() for r in reqs)
    for r in reqs:
        expected = min(r.max_tokens, 40 - r.num_prompt_tokens)
        assert r.num_output_tokens == expected
    assert s.stats().num_preemptions_total > 0
    assert_all_blocks_free(s)


# ---- prefix caching through the scheduler -------------------------------------------------------


def test_prefix_hit_between_requests_counted_in_tokens():
    s = make_scheduler()
    s.add_request(make_request("a", list(range(10)) + [77], max_tokens=2))
    run_to_completion(s)
    s.add_request(make_request("b", list(range(10)) + [88, 89], max_tokens=2))
    out, _ = step(s)
    assert out.requests[0].start_pos == 8 and out.requests[0].num_tokens == 4
    st = s.stats()
    assert st.prefix_cache_queries == 11 + 12 and st.prefix_cache_hits == 8


def test_same_step_admissions_do_not_share_uncomputed_blocks():
    s = make_scheduler()
    s.add_request(make_request("a", 9, max_tokens=2))
    s.add_request(make_request("b", 9, max_tokens=2))
    out, _ = step(s)
    assert scheduled(out) == {"a": 9, "b": 9}, "blocks are published only once computed"
    s.add_request(make_request("c", 9, max_tokens=2))
    out, _ = step(s)
    assert scheduled(out)["c"] == 1


def test_identical_prompt_of_whole_blocks_still_computes_its_last_block():
    s = make_scheduler()
    s.add_request(make_request("a", 12, max_tokens=1))
    run_to_completion(s)
    s.add_request(make_request("b", 12, max_tokens=1))
    out, _ = step(s)
    assert out.requests[0].start_pos == 8 and out.requests[0].num_tokens == 4


def test_hash_collisions_give_no_false_hits(monkeypatch):
    monkeypatch.setattr(kvm, "hash_block_tokens", lambda parent, tokens: 1)
    s = make_scheduler()
    s.add_request(make_request("a", 12, max_tokens=2))
    run_to_completion(s)
    s.add_request(make_request("b", 12, max_tokens=2, start=300))
    out, _ = step(s)
    assert out.requests[0].start_pos == 0 and s.stats().prefix_cache_hits == 0


def test_prefix_caching_off_recomputes_everything():
    s = make_scheduler(enable_prefix_caching=False)
    s.add_request(make_request("a", 12, max_tokens=1))
    run_to_completion(s)
    s.add_request(make_request("b", 12, max_tokens=1))
    out, _ = step(s)
    assert out.requests[0].start_pos == 0 and s.stats().prefix_cache_queries == 0


# ---- waiting-queue policies and batching modes ---------------------------------------------------


def admission_order(s, n):
    order = []
    for _ in range(n * 4):
        out, _ = step(s)
        order += [sr.req_id for sr in out.requests if sr.req_id not in order]
        if len(order) == n:
            break
    return order


def test_sjf_admits_shortest_first():
    s = make_scheduler(policy="sjf", max_num_seqs=1, sjf_aging_tokens_per_s=0.0)
    for name, n in [("long", 30), ("short", 10), ("mid", 20)]:
        s.add_request(make_request(name, n, max_tokens=1))
    assert admission_order(s, 3) == ["short", "mid", "long"]


def test_sjf_aging_bounds_the_wait_of_a_long_prompt():
    clock = FakeClock(now=0.0)
    rate, long_len, short_len, dt = 10.0, 40, 10, 0.5
    bound = (long_len - short_len) / rate  # 3 s
    s = make_scheduler(clock=clock, policy="sjf", max_num_seqs=1, sjf_aging_tokens_per_s=rate)
    long_req = make_request("long", long_len, max_tokens=1, arrival=clock())
    s.add_request(long_req)
    for i in range(100):  # a steady stream of short prompts, one per step, served one per step
        s.add_request(make_request(f"s{i}", short_len, max_tokens=1, arrival=clock(), start=1000 + i))
        step(s, clock=clock, dt=dt)
        if long_req.timestamps.first_scheduled is not None:
            break
    waited = long_req.timestamps.first_scheduled - long_req.arrival_time
    assert 0 < waited <= bound + 1e-9


def test_sjf_without_aging_starves_the_long_prompt():
    clock = FakeClock(now=0.0)
    s = make_scheduler(clock=clock, policy="sjf", max_num_seqs=1, sjf_aging_tokens_per_s=0.0)
    long_req = make_request("long", 40, max_tokens=1, arrival=0.0)
    s.add_request(long_req)
    for i in range(30):
        s.add_request(make_request(f"s{i}", 10, max_tokens=1, arrival=clock(), start=1000 + i))
        step(s, clock=clock, dt=0.5)
    assert long_req.timestamps.first_scheduled is None


def test_priority_orders_by_priority_then_arrival():
    s = make_scheduler(policy="priority", max_num_seqs=1)
    for name, prio, arr in [("p3", 3, 0.0), ("p1-later", 1, 3.0), ("p2", 2, 1.0), ("p1-earlier", 1, 2.0)]:
        s.add_request(make_request(name, 5, max_tokens=1, priority=prio, arrival=arr))
    assert admission_order(s, 4) == ["p1-earlier", "p1-later", "p2", "p3"]


def test_fcfs_orders_by_arrival():
    s = make_scheduler(max_num_seqs=1)
    for name in ["x", "y", "z"]:
        s.add_request(make_request(name, 5, max_tokens=1))
    assert admission_order(s, 3) == ["x", "y", "z"]


def test_static_batching_admits_nobody_until_the_batch_is_done():
    s = make_scheduler(batching="static", max_num_seqs=2)
    s.add_request(make_request("a", 4, max_tokens=2))
    s.add_request(make_request("b", 4, max_tokens=6))
    s.add_request(make_request("c", 4, max_tokens=2))
    step(s)
    while s.get_request("b") is not None:
        out, _ = step(s)
        assert "c" not in scheduled(out)
    out, _ = step(s)
    assert scheduled(out) == {"c": 4}


def test_continuous_batching_admits_as_soon_as_a_slot_frees():
    s = make_scheduler(max_num_seqs=2)
    for name, mt in [("a", 2), ("b", 6), ("c", 2)]:
        s.add_request(make_request(name, 4, max_tokens=mt))
    step(s)
    step(s)  # a finishes
    out, _ = step(s)
    assert scheduled(out) == {"b": 1, "c": 4}


def max_concurrency(layout):
    s = make_scheduler(kv_layout=layout, num_blocks=32, max_model_len=32, max_num_seqs=64)
    for i in range(20):
        s.add_request(make_request(f"r{i}", 5, max_tokens=4, start=10 * i))
    peak = 0
    while s.has_unfinished_requests():
        step(s)
        peak = max(peak, s.num_running)
        if layout == "contiguous":
            for req in s.running:
                assert len(s.kv_cache_manager.get_block_ids(req)) == 8  # ceil(32 / 4)
    assert_all_blocks_free(s)
    return peak


def test_contiguous_layout_holds_fewer_sequences_than_paged():
    contiguous, paged = max_concurrency("contiguous"), max_concurrency("paged")
    assert contiguous == 4 and paged > contiguous


def test_watermark_holds_back_admission_while_others_run():
    s = make_scheduler(num_blocks=16, watermark=0.25)  # 4 blocks must stay free
    s.add_request(make_request("a", 30, max_tokens=20))  # 8 blocks; admitted (nothing runs)
    step(s)
    s.add_request(make_request("b", 17, max_tokens=1, start=500))  # 5 blocks: 16-8-5 < 4
    out, _ = step(s)
    assert "b" not in scheduled(out) and s.num_waiting == 1
    s.add_request(make_request("c", 12, max_tokens=1, start=900))
    out, _ = step(s)
    assert "c" not in scheduled(out), "no skipping ahead of the queue head"
    s.finish_requests("a", RequestStatus.FINISHED_ABORTED)
    out, _ = step(s)
    assert "b" in scheduled(out)


def test_watermark_does_not_block_a_lone_large_prompt():
    s = make_scheduler(num_blocks=16, watermark=0.5, max_model_len=64)
    s.add_request(make_request("big", 60, max_tokens=4))
    run_to_completion(s)
    assert s.stats().num_preemptions_total == 0


# ---- stop conditions ----------------------------------------------------------------------------


def generate(s, req, tokens):
    s.add_request(req)
    for tok in tokens:
        if req.is_finished():
            break
        step(s, token=tok)
    return req


@pytest.mark.parametrize(
    "params,tokens,expected_out,status",
    [
        (dict(max_tokens=10), [5, 5, 2, 5], [5, 5, 2], RequestStatus.FINISHED_STOPPED),
        (dict(max_tokens=4, ignore_eos=True), [2, 2, 2, 2, 2], [2, 2, 2, 2], RequestStatus.FINISHED_LENGTH),
        (dict(max_tokens=10, min_tokens=3), [2, 2, 2, 5], [2, 2, 2], RequestStatus.FINISHED_STOPPED),
        (dict(max_tokens=10, min_tokens=2, stop_token_ids=[9]), [9, 9], [9, 9], RequestStatus.FINISHED_STOPPED),
        (dict(max_tokens=10, stop_token_ids=[9]), [5, 9, 5], [5, 9], RequestStatus.FINISHED_STOPPED),
        (dict(max_tokens=3), [5] * 10, [5, 5, 5], RequestStatus.FINISHED_LENGTH),
        (dict(max_tokens=3), [5, 5, 2], [5, 5, 2], RequestStatus.FINISHED_STOPPED),
        (dict(max_tokens=None), [5] * 100, [5] * 4, RequestStatus.FINISHED_LENGTH),  # max_model_len 64
    ],
    ids=[
        "eos",
        "ignore_eos",
        "min_tokens",
        "stop_ids_after_min",
        "stop_token_ids",
        "max_tokens",
        "eos_beats_length",
        "max_model_len",
    ],
)
def test_stop_conditions(params, tokens, expected_out, status):
    s = make_scheduler()
    req = generate(s, make_request("r", 60, eos_token_id=2, **params), tokens)
    assert req.output_token_ids == expected_out and req.status == status
    assert req.timestamps.finished is not None and s.get_request("r") is None
    assert_all_blocks_free(s)


def test_results_report_new_tokens_and_finished_ids_reach_the_runner():
    s = make_scheduler(max_num_batched_tokens=8)
    s.add_request(make_request("a", 10, max_tokens=1))
    out, results = step(s)
    assert results == [] and out.requests[0].num_tokens == 8  # a chunk: no token yet
    out, results = step(s, token=42)
    ((req, new),) = results
    assert req.request_id == "a" and new == [42] and req.is_finished()
    assert s.schedule().finished_req_ids == {"a"}
    assert s.schedule().finished_req_ids == set()


# ---- aborts and bookkeeping -----------------------------------------------------------------


def test_finish_requests_aborts_waiting_and_running_and_frees_blocks():
    s = make_scheduler(max_num_seqs=1)
    s.add_request(make_request("run", 9, max_tokens=10))
    s.add_request(make_request("wait", 9, max_tokens=10, start=500))
    out, _ = step(s)
    assert scheduled(out) == {"run": 9}
    done = s.finish_requests(["run", "wait", "nope", "run"], RequestStatus.FINISHED_ABORTED)
    assert [r.request_id for r in done] == ["run", "wait"]
    assert all(r.status == RequestStatus.FINISHED_ABORTED for r in done)
    assert not s.has_unfinished_requests() and s.num_running == 0 and s.num_waiting == 0
    assert_all_blocks_free(s)
    assert s.schedule().finished_req_ids == {"run", "wait"}


def test_abort_between_schedule_and_update_is_ignored():
    s = make_scheduler()
    s.add_request(make_request("a", 5, max_tokens=3))
    out = s.schedule()
    s.finish_requests("a", RequestStatus.FINISHED_ABORTED)
    assert s.update_from_output(out, runner_output(out)) == []
    assert_all_blocks_free(s)


def test_timestamps_follow_the_clock():
    clock = FakeClock(now=10.0)
    s = make_scheduler(clock=clock, max_num_batched_tokens=4)
    a = make_request("a", 6, max_tokens=2, arrival=10.0)
    s.add_request(a)
    step(s, clock=clock, dt=1.0)
    step(s, clock=clock, dt=1.0)
    step(s, clock=clock, dt=1.0)
    assert a.timestamps.first_scheduled == 10.0 and a.timestamps.first_token == 11.0
    assert a.timestamps.finished == 12.0


def test_missing_sampled_token_is_tolerated():
    s = make_scheduler()
    s.add_request(make_request("a", 5, max_tokens=2))
    out = s.schedule()
    assert s.update_from_output(out, ModelRunnerOutput()) == []
    out, _ = step(s)
    assert s.get_request("a").num_output_tokens == 0 and out.requests == []


def test_kv_too_small_for_one_request_is_a_user_error():
    with pytest.raises(RefEngineError, match="max_model_len"):
        make_scheduler(num_blocks=3, block_size=4, max_model_len=16)


def test_prompt_must_be_shorter_than_max_model_len():
    s = make_scheduler(max_model_len=16, num_blocks=8)
    with pytest.raises(AssertionError):
        s.add_request(make_request("a", 16))


def test_static_batch_forms_over_several_steps_when_prompts_exceed_the_budget():
    s = make_scheduler(batching="static", max_num_seqs=8, max_num_batched_tokens=10)
    for name in "abcd":
        s.add_request(make_request(name, 4, max_tokens=3))
    first, _ = step(s)
    second, _ = step(s)
    # 10 tokens a step: a, b and part of c, then the rest of c and d join the same batch.
    assert set(scheduled(first)) | set(scheduled(second)) == set("abcd")
    s.add_request(make_request("late", 4, max_tokens=1))
    while any(s.get_request(n) is not None for n in "abcd"):
        out, _ = step(s)
        assert "late" not in scheduled(out)
