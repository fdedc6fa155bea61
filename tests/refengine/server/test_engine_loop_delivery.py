"""The engine loop hands each step's outputs to the event loop in one wake-up, and every stream
still gets all of its tokens, in order, ending with the finished output."""

import asyncio

from refengine.config import EngineArgs
from refengine.engine import LLMEngine
from refengine.sampling_params import SamplingParams
from refengine.server.engine_loop import EngineLoop
from refengine.server.metrics import ServerMetrics


def test_one_wake_up_per_step_and_every_stream_complete():
    engine = LLMEngine(EngineArgs(model="tiny-test", max_model_len=128, max_num_seqs=8))
    loop_thread = EngineLoop(engine)
    wake_ups = 0

    async def run():
        nonlocal wake_ups
        loop = asyncio.get_running_loop()
        real = loop.call_soon_threadsafe

        def counting(callback, *args):
            nonlocal wake_ups
            wake_ups += 1
            return real(callback, *args)

        loop.call_soon_threadsafe = counting
        loop_thread.start()

        async def consume(i: int) -> list[list[int]]:
            params = SamplingParams(max_tokens=5 + i, temperature=0.0, ignore_eos=True)
            seen = []
            async for out in loop_thread.generate([3 + i] * 6, params, f"r{i}"):
                seen.append(list(out.outputs[0].token_ids))
                if out.finished:
                    assert len(out.outputs[0].token_ids) == 5 + i
            return seen

        return await asyncio.gather(*(consume(i) for i in range(8)))

    try:
        results = asyncio.run(run())
    finally:
        loop_thread.stop()
    for i, seen in enumerate(results):
        assert [len(ids) for ids in seen] == list(range(1, 6 + i))  # one output per token, in order
        assert all(seen[k] == seen[-1][: len(seen[k])] for k in range(len(seen)))
    # 8 streams ran together: per-output delivery would need 5+...+12 = 68 wake-ups; per step,
    # the longest request's 12 tokens plus the prefill steps.
    assert wake_ups <= engine.num_steps < sum(5 + i for i in range(8))


def test_queue_time_counts_from_admission_not_from_when_the_engine_thread_took_it():
    """A request admitted while a step runs waits for it: that wait is queue time (vLLM's arrival is
    the front end's too), not time "outside the server"."""
    import threading
    import time

    engine = LLMEngine(EngineArgs(model="tiny-test", max_model_len=128, max_num_seqs=8))
    real_step = engine.step
    in_step = threading.Event()
    step_spans: list[tuple[float, float]] = []  # (start, end) of each step's compute, monotonic

    def slow_step():
        start = time.monotonic()
        outputs = real_step()
        in_step.set()
        time.sleep(0.3)  # the step's compute: long, as a big prefill on a CPU
        step_spans.append((start, time.monotonic()))
        return outputs

    engine.step = slow_step
    loop_thread = EngineLoop(engine)
    metrics = ServerMetrics(loop_thread, "tiny-test", engine.cache_config.block_size, engine.cache_config.num_blocks)
    waiting: list[float] = []
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)

    async def run():
        loop_thread.start()
        first = loop_thread.generate([3] * 6, params, "a")
        await first.__anext__()  # "a" streams ...
        in_step.clear()
        await asyncio.to_thread(in_step.wait, 30)  # ... and the engine thread is inside its next step
        second = loop_thread.generate([4] * 6, params, "b")  # admitted; the engine thread is busy
        page = metrics.render().decode()
        waiting.append(
            next(float(line.split()[-1]) for line in page.splitlines() if line.startswith("vllm:num_requests_waiting{"))
        )
        last = None
        async for out in second:
            last = out
        async for _ in first:
            pass
        return last

    try:
        out = asyncio.run(run())
    finally:
        loop_thread.stop()
    ts = out.timestamps
    running = [(a, b) for a, b in step_spans if a <= ts.arrival < b]
    assert running, (ts, step_spans)  # it arrived while a step ran ...
    assert ts.first_scheduled >= running[0][1], ts  # ... and waited for it: queue time
    assert waiting == [1.0]  # and the waiting gauge counted it meanwhile
