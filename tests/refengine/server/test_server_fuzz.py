"""Hypothesis-generated hostile bodies against a real `python -m refengine.server` on loopback:
never a 5xx, never a hang, never an error inside the engine, and the engine serves afterwards."""

from __future__ import annotations

import json

import httpx
import pytest
from hostile_bodies import BODIES
from hypothesis import HealthCheck, given, settings

FUZZ_SETTINGS = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def fuzz_client(robust_server):
    # No keep-alive: the server closes idle connections after 1 s, and a request must not race that.
    with httpx.Client(
        base_url=robust_server[0], timeout=httpx.Timeout(30.0), limits=httpx.Limits(max_keepalive_connections=0)
    ) as client:
        yield client


def send(client: httpx.Client, path: str, raw: bytes) -> int:
    """POST one body, read the whole response (a stream to its end); assert it is well-formed."""
    with client.stream("POST", path, content=raw, headers={"content-type": "application/json"}) as r:
        lines = [line for line in r.iter_lines() if line]
        assert r.status_code < 500, (path, raw[:300], r.status_code, lines[:3])
        if r.status_code >= 400:
            err = json.loads("".join(lines))["error"]
            assert isinstance(err["message"], str) and err["message"], err
            assert err["param"] is None or isinstance(err["param"], str), err
        elif r.headers["content-type"].startswith("text/event-stream"):
            assert lines[-1] == "data: [DONE]", (raw[:300], lines[-3:])
            assert not any('"error"' in line for line in lines[:-1]), (raw[:300], lines)
        return r.status_code


def assert_engine_serves(client: httpx.Client) -> None:
    assert client.get("/health").status_code == 200
    ok = client.post("/v1/completions", json={"prompt": "hello", "max_tokens": 3, "temperature": 0})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] >= 1
    metrics = client.get("/metrics").text
    assert 'refengine:healthy{model_name="tiny-test"} 1.0' in metrics
    assert "refengine:engine_step_failures_total{" not in metrics, "a fuzzed input failed inside the engine"


def _fuzz(client: httpx.Client, max_examples: int) -> None:
    statuses = []

    @settings(max_examples=max_examples, **FUZZ_SETTINGS)
    @given(BODIES)
    def one(example):
        statuses.append(send(client, *example))

    one()
    assert_engine_serves(client)
    assert 200 in statuses and any(400 <= s < 500 for s in statuses), sorted(set(statuses))


def test_fuzzed_bodies_never_5xx_and_the_engine_lives(fuzz_client):
    _fuzz(fuzz_client, max_examples=150)


@pytest.mark.slow
def test_fuzzed_bodies_long_run(fuzz_client):
    _fuzz(fuzz_client, max_examples=2000)
