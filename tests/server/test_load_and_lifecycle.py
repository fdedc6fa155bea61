"""64 concurrent streams, metrics that agree with what was sent, disconnects that free KV blocks,
overload answered with 503, and a clean exit on SIGTERM."""

import asyncio
import json
import signal

import httpx
from prometheus_client.parser import text_string_to_metric_families


def _metrics(url: str) -> dict:
    out = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in fam.samples:
            key = s.name + json.dumps(dict(sorted((k, v) for k, v in s.labels.items() if k != "model_name")))
            out[key] = s.value
    return out


async def _stream_one(client: httpx.AsyncClient, i: int) -> tuple[int, int, str]:
    body = {"prompt": [3 + i % 50] * (5 + i % 20), "max_tokens": 6 + i % 5, "temperature": 0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
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
            async with httpx.AsyncClient(base_url=srv.url, timeout=120,
                                         limits=httpx.Limits(max_connections=100)) as client:
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
    assert after['vllm:cache_config_info{"block_size": "16", "num_gpu_blocks": "%d"}' % srv.engine.cache_config.num_blocks] == 1


def test_disconnect_mid_stream_aborts_and_frees_blocks(InProcessServer):
    with InProcessServer() as srv:
        with httpx.stream("POST", srv.url + "/v1/completions", timeout=60,
                          json={"prompt": [9] * 40, "max_tokens": 200, "stream": True, "ignore_eos": True}) as r:
            for n, _line in enumerate(r.iter_lines()):
                if n >= 3:
                    break          # leave mid-stream: the response is closed here
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


def test_sigterm_exits_cleanly_during_a_stream(start_server_process):
    proc, url = start_server_process()
    try:
        with httpx.stream("POST", url + "/v1/completions", timeout=60,
                          json={"prompt": [9] * 10, "max_tokens": 200, "stream": True, "ignore_eos": True}) as r:
            lines = r.iter_lines()
            next(lines)
            proc.send_signal(signal.SIGTERM)
            rest = list(lines)          # the stream finishes (or is aborted) and closes
        assert rest
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
