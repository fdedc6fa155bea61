"""Defence in depth: a request that still fails inside the engine is finished with an error on its
own stream, the other requests carry on, /health stays 200; only an engine that cannot be trusted
any more (failures nobody can be blamed for, step after step) reports 503.

The failures are injected into a real in-process server's engine (the inputs that used to cause
them are now refused at the door: tests/refengine/server/test_robustness_inputs.py)."""

from __future__ import annotations

import asyncio
import json

import httpx
from prometheus_client.parser import text_string_to_metric_families

from refengine import LLM, SamplingParams
from refengine.server.engine_loop import MAX_CONSECUTIVE_FAILURES

POISON_SEED = 13
HEALTHY = {"prompt": [5, 17, 300, 42, 9], "max_tokens": 24, "temperature": 0, "ignore_eos": True, "stream": True}


def _poison_sampler(engine) -> None:
    """Sampling raises for rows whose seed is POISON_SEED, as a sampler bug would for odd params."""
    sampler = engine.runner.sampler
    original = sampler._generator

    def generator(row):
        if row.params.seed == POISON_SEED:
            raise FloatingPointError("injected: this row's distribution is broken")
        return original(row)

    sampler._generator = generator


async def _stream(client: httpx.AsyncClient, body: dict) -> tuple[int, str, list[dict]]:
    async with client.stream("POST", "/v1/completions", json=body) as r:
        lines = [line async for line in r.aiter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks if c.get("choices"))
    return r.status_code, text, chunks


def _metric(url: str, name: str, **labels: str) -> float:
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


def test_a_failing_request_fails_alone_and_the_others_finish(InProcessServer):
    expected = (
        LLM(model="tiny-test", max_model_len=256)
        .generate([HEALTHY["prompt"]], SamplingParams(max_tokens=24, temperature=0, ignore_eos=True))[0]
        .outputs[0]
        .text
    )
    with InProcessServer() as srv:
        _poison_sampler(srv.engine)
        poison = {"prompt": "hello", "max_tokens": 8, "temperature": 0.8, "seed": POISON_SEED}

        async def run():
            async with httpx.AsyncClient(base_url=srv.url, timeout=60) as client:
                healthy = asyncio.create_task(_stream(client, HEALTHY))
                await asyncio.sleep(0.05)
                plain = await client.post("/v1/completions", json=poison)
                streamed = await _stream(client, {**poison, "stream": True})
                return await healthy, plain, streamed

        (status, text, _), plain, (s_status, _, s_chunks) = asyncio.run(run())
        srv.wait_idle()
        assert status == 200 and text == expected  # redone after the failed steps, token for token
        assert plain.status_code == 500
        assert plain.json()["error"]["type"] == "server_error"
        assert "failed inside the engine" in plain.json()["error"]["message"]
        assert s_status == 200 and "failed inside the engine" in s_chunks[-1]["error"]["message"]
        assert httpx.get(srv.url + "/health").status_code == 200
        ok = httpx.post(srv.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=60)
        assert ok.status_code == 200
        srv.engine.scheduler.kv_cache_manager.check_integrity()
        assert _metric(srv.url, "vllm:request_success_total", finished_reason="error") == 2
        assert _metric(srv.url, "refengine:engine_step_failures_total", attributed="true") == 2
        assert _metric(srv.url, "vllm:request_success_total", finished_reason="length") == 2
        assert srv.engine.scheduler.kv_cache_manager.usage == 0


def _fail_next_steps(engine, n: int) -> None:
    """The next n model executions raise, as a forward-pass bug would: nobody to blame."""
    original = engine.executor.execute_model
    left = [n]

    def execute_model(sched):
        if left[0] > 0 and not sched.is_empty:
            left[0] -= 1
            raise IndexError("injected: the forward pass failed")
        return original(sched)

    engine.executor.execute_model = execute_model


def test_an_unattributed_failure_fails_its_step_and_the_loop_goes_on(InProcessServer):
    with InProcessServer() as srv:
        _fail_next_steps(srv.engine, 1)
        r = httpx.post(srv.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 4}, timeout=60)
        assert r.status_code == 500 and "failed inside the engine" in r.json()["error"]["message"]
        srv.wait_idle()
        assert httpx.get(srv.url + "/health").status_code == 200
        ok = httpx.post(srv.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 4}, timeout=60)
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 4
        assert _metric(srv.url, "refengine:engine_step_failures_total", attributed="false") == 1
        srv.engine.scheduler.kv_cache_manager.check_integrity()


def test_failure_after_failure_with_nobody_to_blame_is_a_dead_engine(InProcessServer):
    with InProcessServer() as srv:
        _fail_next_steps(srv.engine, MAX_CONSECUTIVE_FAILURES)
        for _ in range(MAX_CONSECUTIVE_FAILURES):
            r = httpx.post(srv.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 4}, timeout=60)
            assert r.status_code in (500, 503)
        health = httpx.get(srv.url + "/health")
        assert health.status_code == 503 and "in a row" in health.json()["error"]
        r = httpx.post(srv.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 4}, timeout=60)
        assert r.status_code == 503
