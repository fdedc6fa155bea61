"""64 concurrent streams, metrics that agree with what was sent, disconnects that free KV blocks,
overload answered with 503, and a clean exit on SIGTERM."""

import asyncio
import json
import signal
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families


def _metrics(url: str) -> dict:
    out = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in fam.samples:
            key = s.name + json.dumps(dict(sorted((k, v) for k, v in s.labels.items() if k != "model_name")))
            out[key] = s.value
    return out


async def _stream_one(client: httpx.AsyncClient, i: int) -> tuple[int, int, str]:
    body = {
        "prompt": [3 + i % 50] * (5 + i % 20),
        "max_tokens": 6 + i % 5,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    usage, done = None, False
    async with client.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                obj = json.loads(line[6:])
                usage = obj.get("usage") or usage
    assert done
    return usage["prompt_tokens"], usage["completion_tokens"], body["max_tokens"]


def test_64_concurrent_streams_and_metrics_agree(InProcessServer):
    with InProcessServer(max_num_seqs=64) as srv:
        before = _metrics(srv.url)

        async def run():
            async with httpx.AsyncClient(
                base_url=srv.url, timeout=120, limits=httpx.Limits(max_connections=100)
            ) as client:
                return await asyncio.gather(*(_stream_one(client, i) for i in range(64)))

        results = asyncio.run(run())
        srv.wait_idle()
        after = _metrics(srv.url)
    prompt_total = sum(p for p, _, _ in results)
    gen_total = sum(c for _, c, _ in results)
    assert all(c == m for _, c, m in results)
    assert all(p == 5 + i % 20 for i, (p, _, _) in enumerate(results))

    def delta(key):
        return after.get(key, 0) - before.get(key, 0)

    assert delta('vllm:request_success_total{"finished_reason": "length"}') == 64
    assert delta("vllm:prompt_tokens_total{}") == prompt_total
    assert delta("vllm:generation_tokens_total{}") == gen_total
    assert delta("vllm:time_to_first_token_seconds_count{}") == 64
    assert delta("vllm:e2e_request_latency_seconds_count{}") == 64
    assert delta("vllm:inter_token_latency_seconds_count{}") == gen_total - 64
    assert after["vllm:num_requests_running{}"] == 0 and after["vllm:kv_cache_usage_perc{}"] == 0
    assert (
        after['vllm:cache_config_info{"block_size": "16", "num_gpu_blocks": "%d"}' % srv.engine.cache_config.num_blocks]
        == 1
    )


def test_disconnect_mid_stream_aborts_and_frees_blocks(InProcessServer):
    with InProcessServer() as srv:
        with httpx.stream(
            "POST",
            srv.url + "/v1/completions",
            timeout=60,
            json={"prompt": [9] * 40, "max_tokens": 200, "stream": True, "ignore_eos": True},
        ) as r:
            for n, _line in enumerate(r.iter_lines()):
                if n >= 3:
                    break  # leave mid-stream: the response is closed here
        srv.wait_idle()
        srv.engine.scheduler.kv_cache_manager.check_integrity()
        m = _metrics(srv.url)
        assert m['vllm:request_success_total{"finished_reason": "abort"}'] == 1
        assert m["vllm:kv_cache_usage_perc{}"] == 0
        ok = httpx.post(srv.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=60)
        assert ok.status_code == 200


def test_overload_gets_503_and_nothing_is_lost(InProcessServer):
    # max_num_seqs=1 keeps requests waiting; a waiting bound of 2 makes the rest overflow.
    with InProcessServer(max_waiting=2, max_num_seqs=1) as srv:

        async def run():
            async with httpx.AsyncClient(base_url=srv.url, timeout=120) as client:
                body = {"prompt": [4] * 10, "max_tokens": 30, "ignore_eos": True}
                return await asyncio.gather(*(client.post("/v1/completions", json=body) for _ in range(12)))

        responses = asyncio.run(run())
        srv.wait_idle()
        codes = [r.status_code for r in responses]
        assert set(codes) <= {200, 503} and 503 in codes and 200 in codes
        assert all("overloaded" in r.json()["error"]["message"] for r in responses if r.status_code == 503)
        m = _metrics(srv.url)
        assert m['vllm:request_success_total{"finished_reason": "length"}'] == codes.count(200)
        assert m['refengine:requests_rejected_total{"reason": "overloaded"}'] == codes.count(503)


@pytest.mark.slow
def test_sigterm_exits_cleanly_during_a_stream(start_server_process):
    proc, url = start_server_process()
    try:
        with httpx.stream(
            "POST",
            url + "/v1/completions",
            timeout=60,
            json={"prompt": [9] * 10, "max_tokens": 200, "stream": True, "ignore_eos": True},
        ) as r:
            lines = r.iter_lines()
            next(lines)
            proc.send_signal(signal.SIGTERM)
            rest = list(lines)  # the stream finishes (or is aborted) and closes
        assert rest
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_waiting_bound_holds_at_admission_under_10x_overload(InProcessServer):
    # 40 clients for 4 waiting places. Requests admitted during a step used to be counted neither as
    # pending (already drained) nor as waiting (stats refreshed after the step): twice the bound waited.
    with InProcessServer(max_waiting=4, max_num_seqs=1) as srv:
        engine = srv.engine
        waiting_seen = []
        add, step = engine.add_request, engine.step

        def add_request(*args, **kwargs):
            out = add(*args, **kwargs)
            waiting_seen.append(engine.scheduler.num_waiting)
            return out

        def slow_step():
            time.sleep(0.02)
            return step()

        engine.add_request, engine.step = add_request, slow_step

        async def worker(client, until):  # a closed loop: the next request as soon as one is answered
            body = {"prompt": [4] * 10, "max_tokens": 4, "ignore_eos": True}
            out = []
            while time.monotonic() < until:
                out.append(await client.post("/v1/completions", json=body))
                await asyncio.sleep(0.005)
            return out

        async def run():
            async with httpx.AsyncClient(
                base_url=srv.url, timeout=120, limits=httpx.Limits(max_connections=50)
            ) as client:
                until = time.monotonic() + 1.5
                return [r for rs in await asyncio.gather(*(worker(client, until) for _ in range(40))) for r in rs]

        responses = asyncio.run(run())
        srv.wait_idle()
        codes = [r.status_code for r in responses]
        assert set(codes) <= {200, 503} and codes.count(503) > 0
        assert max(waiting_seen) <= 4, waiting_seen
        m = _metrics(srv.url)
        assert m['vllm:request_success_total{"finished_reason": "length"}'] == codes.count(200) == len(waiting_seen)
        assert m['refengine:requests_rejected_total{"reason": "overloaded"}'] == codes.count(503)
        assert srv.server.loop.num_waiting_admitted == 0


def test_clients_that_leave_while_waiting_give_their_places_back(InProcessServer):
    with InProcessServer(max_waiting=2, max_num_seqs=1) as srv:
        step = srv.engine.step
        srv.engine.step = lambda: (time.sleep(0.01), step())[1]  # the running request lasts ~2 s
        loop = srv.server.loop
        running = {"prompt": [9] * 10, "max_tokens": 200, "ignore_eos": True, "stream": True}
        waiting = {"prompt": [8] * 10, "max_tokens": 2, "ignore_eos": True, "stream": True}
        with (
            httpx.Client(base_url=srv.url, timeout=60) as client,
            client.stream("POST", "/v1/completions", json=running) as long_one,
        ):
            long_lines = long_one.iter_lines()
            next(long_lines)  # it is running
            for _ in range(2):  # two wait, and leave before their turn
                with client.stream("POST", "/v1/completions", json=waiting) as r:
                    assert r.status_code == 200
            deadline = time.monotonic() + 10
            while loop.num_waiting_admitted and time.monotonic() < deadline:
                time.sleep(0.01)
            assert loop.num_waiting_admitted == 0  # their places are free again
            with (
                httpx.Client(base_url=srv.url, timeout=60) as a,
                httpx.Client(base_url=srv.url, timeout=60) as b,
                a.stream("POST", "/v1/completions", json=waiting) as r1,
                b.stream("POST", "/v1/completions", json=waiting) as r2,
            ):
                third = client.post("/v1/completions", json=waiting)
                assert (r1.status_code, r2.status_code, third.status_code) == (200, 200, 503)
                assert [line for line in r1.iter_lines() if line][-1] == "data: [DONE]"
                assert [line for line in r2.iter_lines() if line][-1] == "data: [DONE]"
            assert [line for line in long_lines if line][-1] == "data: [DONE]"
        srv.wait_idle()
        srv.engine.scheduler.kv_cache_manager.check_integrity()
        m = _metrics(srv.url)
        assert m['vllm:request_success_total{"finished_reason": "abort"}'] == 2
        assert m['vllm:request_success_total{"finished_reason": "length"}'] == 3
        assert m['refengine:requests_rejected_total{"reason": "overloaded"}'] == 1


def test_first_token_histograms_count_a_stream_cut_off_after_its_first_token(InProcessServer):
    """TTFT, queue and prefill time are observed at the first token: a client that leaves mid-stream
    is still in them (a level cut off by its end is diagnosed from them)."""
    with InProcessServer() as srv:
        before = _metrics(srv.url)
        body = {"prompt": [5] * 12, "max_tokens": 200, "temperature": 0, "stream": True, "ignore_eos": True}
        with httpx.Client(base_url=srv.url, timeout=60) as client:
            with client.stream("POST", "/v1/completions", json=body) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        break  # the first token is here; leave
            seen = _metrics(srv.url)  # scraped while nothing finished
        srv.wait_idle()
        after = _metrics(srv.url)

    def delta(m, key):
        return m.get(key, 0) - before.get(key, 0)

    for name in ("time_to_first_token_seconds", "request_queue_time_seconds", "request_prefill_time_seconds"):
        assert delta(seen, f"vllm:{name}_count{{}}") == 1 and delta(after, f"vllm:{name}_count{{}}") == 1, name
    assert delta(after, 'vllm:request_success_total{"finished_reason": "abort"}') == 1
