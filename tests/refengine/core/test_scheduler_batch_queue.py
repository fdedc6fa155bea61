"""The scheduler under a batch queue (pipeline parallelism): several batches in flight at once.

A simulated batch queue of depth D schedules up to D batches before the oldest lands; each
check is one of the invariants the scheduler promises (refengine/core/scheduler.py docstring).
"""

from collections import deque

import pytest
from core_sim import assert_all_blocks_free, check_output, make_request, make_scheduler, runner_output

from refengine.request import RequestStatus


def batch_queue_scheduler(depth=2, **kwargs):
    s = make_scheduler(**kwargs)
    s.max_batches_in_flight = depth  # what Scheduler(..., max_batches_in_flight=depth) sets
    return s


def in_flight_ids(queue):
    return [r.req_id for out in queue for r in out.requests]


def run_batch_queue(s, depth, max_steps=5000, token=7, on_land=None):
    """The engine's loop: schedule while fewer than `depth` batches are in flight, land the oldest
    when the queue is full or nothing new could be scheduled. Checks the invariants every step."""
    queue, outs = deque(), []
    for _ in range(max_steps):
        if not s.has_unfinished_requests() and not queue:
            return outs
        scheduled = False
        if len(queue) < depth:
            out = s.schedule()
            check_output(s, out)
            ids = in_flight_ids(queue)
            for r in out.requests:
                assert r.req_id not in ids, f"{r.req_id} scheduled while its previous batch is in flight"
            if out.requests:
                queue.append(out)
                outs.append(out)
                scheduled = True
            assert set(s.in_flight) == set(in_flight_ids(queue))
        if queue and (not scheduled or len(queue) == depth):
            oldest = queue.popleft()
            s.update_from_output(oldest, runner_output(oldest, token))
            s.kv_cache_manager.check_integrity()
            if on_land is not None:
                on_land(s, queue)
    raise AssertionError("no progress")


def test_in_flight_requests_are_skipped_until_their_batch_lands():
    s = batch_queue_scheduler(depth=2)
    for rid in "abcd":
        s.add_request(make_request(rid, 6, max_tokens=3))
    first = s.schedule()
    assert [r.req_id for r in first.requests] == ["a", "b"]  # half of the 4 live requests
    second = s.schedule()
    assert [r.req_id for r in second.requests] == ["c", "d"]
    assert s.in_flight == {"a": first.step_id, "b": first.step_id, "c": second.step_id, "d": second.step_id}
    with pytest.raises(AssertionError, match="batches in flight"):
        s.schedule()  # the queue is full: the engine must land the oldest first
    s.update_from_output(first, runner_output(first))
    third = s.schedule()
    assert [r.req_id for r in third.requests] == ["a", "b"]  # c, d still in flight
    assert all(r.start_pos == 6 and r.num_tokens == 1 for r in third.requests)


def test_batches_must_land_in_order():
    s = batch_queue_scheduler(depth=2)
    for rid in "ab":
        s.add_request(make_request(rid, 4))
    first, second = s.schedule(), s.schedule()
    with pytest.raises(AssertionError, match="land in order"):
        s.update_from_output(second, runner_output(second))
    s.update_from_output(first, runner_output(first))
    s.update_from_output(second, runner_output(second))
    assert not s.in_flight


def test_in_flight_request_is_never_a_preemption_victim():
    # 4 blocks of 4 tokens: a (admitted first) and b each hold 2 blocks after an 8-token prompt.
    s = batch_queue_scheduler(depth=2, num_blocks=4, max_model_len=16, max_num_batched_tokens=16)
    s.add_request(make_request("a", 8, max_tokens=4))
    s.add_request(make_request("b", 8, max_tokens=4, start=200))
    first = s.schedule()
    assert [r.req_id for r in first.requests] == ["a"]
    second = s.schedule()
    assert [r.req_id for r in second.requests] == ["b"]
    s.update_from_output(first, runner_output(first))
    # a needs a third block; the fcfs victim would be b (newest), but b is in flight: a itself goes.
    out = s.schedule()
    assert out.preempted_req_ids == {"a"} and not out.requests
    assert s.get_request("b").status == RequestStatus.RUNNING and "b" in s.in_flight
    assert s.kv_cache_manager.get_block_ids(s.get_request("b")) == second.requests[0].block_ids
    s.update_from_output(second, runner_output(second))
    s.kv_cache_manager.check_integrity()


def test_aborted_in_flight_request_keeps_its_blocks_until_the_batch_lands():
    s = batch_queue_scheduler(depth=2)
    s.add_request(make_request("a", 8))
    s.add_request(make_request("b", 8, start=200))
    first = s.schedule()
    blocks = first.requests[0].block_ids
    s.finish_requests("a", RequestStatus.FINISHED_ABORTED)
    assert s.get_request("a") is None and s.has_unfinished_requests()
    free_before = s.kv_cache_manager.get_num_free_blocks()
    second = s.schedule()
    assert not set(blocks) & set(r for req in second.requests for r in req.block_ids), "a's blocks reused in flight"
    s.update_from_output(first, runner_output(first))  # a's batch lands: now its blocks are freed
    assert s.kv_cache_manager.get_num_free_blocks() == free_before - len(second.requests[0].block_ids) + len(blocks)
    s.update_from_output(second, runner_output(second))
    s.finish_requests("b", RequestStatus.FINISHED_ABORTED)
    assert not s.has_unfinished_requests()
    assert_all_blocks_free(s)


@pytest.mark.parametrize("policy", ["fcfs", "priority", "sjf"])
@pytest.mark.parametrize("depth", [2, 3])
def test_many_requests_under_a_tight_kv_budget_all_finish(policy, depth):
    """Varied lengths, preemption-inducing budget: every request gets its tokens, no block leaks."""
    s = batch_queue_scheduler(depth=depth, num_blocks=12, max_model_len=32, max_num_batched_tokens=24, policy=policy)
    requests = [
        make_request(f"r{i}", 3 + (7 * i) % 13, max_tokens=2 + i % 5, priority=i % 3, arrival=float(i), start=100 * i)
        for i in range(10)
    ]
    for r in requests:
        s.add_request(r)
    max_in_flight = [0]

    def on_land(sched, queue):
        max_in_flight[0] = max(max_in_flight[0], len(queue) + 1)

    outs = run_batch_queue(s, depth, on_land=on_land)
    assert s.num_preemptions_total > 0, "the budget was meant to force preemption"
    assert max_in_flight[0] >= 2, "batches never overlapped"
    assert all(
        r.status == RequestStatus.FINISHED_LENGTH and r.num_output_tokens == r.sampling_params.max_tokens
        for r in requests
    )
    assert_all_blocks_free(s)
    assert not s.in_flight and not s._free_on_landing
    assert len({o.step_id for o in outs}) == len(outs)


def test_depth_one_keeps_the_old_behaviour():
    s = make_scheduler()
    s.add_request(make_request("a", 4))
    first = s.schedule()
    assert not s.in_flight
    again = s.schedule()  # no batch queue: nothing is tracked, the same tokens are scheduled again
    assert [r.req_id for r in again.requests] == ["a"] and again.requests[0].start_pos == first.requests[0].start_pos
