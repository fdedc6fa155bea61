"""Property-based tests: random workloads keep every invariant and always drain completely."""

import heapq

from core_sim import FakeClock, assert_all_blocks_free, check_output, make_request, make_scheduler, runner_output
from hypothesis import given, settings
from hypothesis import strategies as st

from refengine.core.request_queue import create_request_queue
from refengine.request import RequestStatus

EOS = 3


@st.composite
def configs(draw):
    block_size = draw(st.sampled_from([1, 2, 4, 8]))
    max_model_len = draw(st.integers(8, 48))
    chunked = draw(st.booleans())
    min_blocks = -(-max_model_len // block_size)
    return dict(
        block_size=block_size,
        max_model_len=max_model_len,
        enable_chunked_prefill=chunked,
        num_blocks=draw(st.integers(min_blocks, min_blocks * 3)),
        max_num_batched_tokens=draw(st.integers(1 if chunked else max_model_len, 2 * max_model_len)),
        max_num_seqs=draw(st.integers(1, 8)),
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 3, 7])),
        policy=draw(st.sampled_from(["fcfs", "priority", "sjf"])),
        sjf_aging_tokens_per_s=draw(st.sampled_from([0.0, 5.0, 100.0])),
        watermark=draw(st.sampled_from([0.0, 0.05, 0.2])),
        kv_layout=draw(st.sampled_from(["paged", "paged", "contiguous"])),
        batching=draw(st.sampled_from(["continuous", "continuous", "static"])),
        enable_prefix_caching=draw(st.booleans()),
    )


add_op = st.tuples(
    st.just("add"), st.integers(1, 60), st.integers(0, 3), st.integers(1, 20), st.integers(0, 2), st.booleans()
)
ops = st.lists(
    st.one_of(add_op, st.just(("step",)), st.just(("step",)), st.tuples(st.just("abort"), st.integers(0, 30))),
    max_size=60,
)


def apply_step(s, tokens, clock):
    out = s.schedule()
    check_output(s, out)
    token = {sr.req_id: tokens[(sr.end_pos + len(sr.req_id)) % len(tokens)] for sr in out.requests}
    results = s.update_from_output(out, runner_output(out, token))
    s.kv_cache_manager.check_integrity()
    for req, new in results:
        assert len(new) == 1 and req.output_token_ids[-1] == new[0]
    clock.advance(0.01)
    return out


@settings(max_examples=100, deadline=None)
@given(cfg=configs(), operations=ops, tokens=st.lists(st.integers(0, 9), min_size=1, max_size=8))
def test_random_workloads_keep_integrity_and_drain(cfg, operations, tokens):
    clock = FakeClock()
    s = make_scheduler(clock=clock, **cfg)
    requests = []
    for op in operations:
        if op[0] == "add":
            _, length, prefix_group, max_tokens, priority, use_eos = op
            length = min(length, cfg["max_model_len"] - 1)
            # Requests in the same group share their leading tokens, so prefixes collide.
            prompt = [prefix_group * 1000 + i for i in range(length)]
            if len(requests) % 3 == 0:
                prompt[-1] = 999_999 - len(requests)
            req = make_request(
                f"r{len(requests)}",
                prompt,
                max_tokens=max_tokens,
                priority=priority,
                eos_token_id=EOS if use_eos else None,
                arrival=clock(),
            )
            requests.append(req)
            s.add_request(req)
        elif op[0] == "step":
            apply_step(s, tokens, clock)
        else:
            if requests:
                s.finish_requests([requests[op[1] % len(requests)].request_id], RequestStatus.FINISHED_ABORTED)
            s.kv_cache_manager.check_integrity()

    for _ in range(5000):
        if not s.has_unfinished_requests():
            break
        apply_step(s, tokens, clock)
    assert not s.has_unfinished_requests(), "the scheduler stopped making progress"
    assert_all_blocks_free(s)
    for req in requests:
        assert req.is_finished()
        limit = min(req.max_tokens, cfg["max_model_len"] - req.num_prompt_tokens)
        assert req.num_output_tokens <= limit
        if req.status == RequestStatus.FINISHED_LENGTH:
            assert req.num_output_tokens == limit
        elif req.status == RequestStatus.FINISHED_STOPPED:
            assert req.output_token_ids[-1] == EOS and req.eos_token_id == EOS
    st_ = s.stats()
    assert st_.num_running == st_.num_waiting == 0 and st_.kv_usage == 0.0
    assert st_.prefix_cache_hits <= st_.prefix_cache_queries


@settings(max_examples=100, deadline=None)
@given(
    policy=st.sampled_from(["fcfs", "priority", "sjf"]),
    items=st.lists(st.tuples(st.integers(1, 50), st.integers(0, 3), st.integers(0, 20)), max_size=20),
    removals=st.lists(st.integers(0, 19), max_size=5),
)
def test_request_queues_pop_in_policy_order(policy, items, removals):
    rate = 2.0
    q = create_request_queue(policy, rate)
    reqs = [make_request(f"q{i}", n, priority=p, arrival=float(t)) for i, (n, p, t) in enumerate(items)]
    for r in reqs:
        q.add(r)
    removed = set()
    for idx in removals:
        if idx < len(reqs) and idx not in removed:
            q.remove(reqs[idx])
            removed.add(idx)
    kept = [(i, r) for i, r in enumerate(reqs) if i not in removed]
    assert len(q) == len(kept) and {r.request_id for r in q} == {r.request_id for _, r in kept}
    if policy == "fcfs":
        expected = [r for _, r in kept]
    elif policy == "priority":
        expected = [r for _, r in sorted(kept, key=lambda ir: (ir[1].priority, ir[1].arrival_time, ir[0]))]
    else:
        expected = [
            r
            for _, r in sorted(
                kept, key=lambda ir: (ir[1].num_tokens + rate * ir[1].arrival_time, ir[1].arrival_time, ir[0])
            )
        ]
    assert list(q) == expected
    popped = []
    while q:
        top = q.peek()
        popped.append(q.pop())
        assert popped[-1] is top
    assert popped == expected


def test_fcfs_prepend_puts_preempted_requests_first():
    q = create_request_queue("fcfs")
    a, b, c = (make_request(n, 4) for n in "abc")
    q.add(a)
    q.add(b)
    q.prepend(c)
    assert [q.pop(), q.pop(), q.pop()] == [c, a, b]


def test_sjf_key_is_time_invariant_so_a_heap_suffices():
    # remaining - rate*(now - arrival) ranks requests identically at every `now`.
    rate = 3.0
    reqs = [(n, t) for n, t in [(30, 0.0), (10, 5.0), (20, 2.0), (5, 9.0)]]
    orders = set()
    for now in [10.0, 100.0, 1000.0]:
        heap = [(n - rate * (now - t), i) for i, (n, t) in enumerate(reqs)]
        heapq.heapify(heap)
        orders.add(tuple(heapq.heappop(heap)[1] for _ in range(len(reqs))))
    assert len(orders) == 1
