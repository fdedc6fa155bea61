"""Every mistake a client can make gets its status and a message that says what to fix; the
next good request still succeeds."""

import httpx
import pytest

AUTH = {"Authorization": "Bearer sekret"}
GOOD = {"model": "tiny-test", "prompt": "hello", "max_tokens": 2}

CASES = [
    ("malformed json", dict(content=b"{not json", headers=AUTH), 400, "not valid JSON"),
    ("not an object", dict(json=[1, 2], headers=AUTH), 400, "JSON object"),
    ("missing prompt", dict(json={"model": "tiny-test"}, headers=AUTH), 400, "'prompt' is required"),
    ("prompt too long", dict(json={"prompt": [7] * 300}, headers=AUTH), 400, "max_model_len"),
    ("max_tokens 0", dict(json={"prompt": "x", "max_tokens": 0}, headers=AUTH), 400, "max_tokens"),
    ("max_tokens string", dict(json={"prompt": "x", "max_tokens": "5"}, headers=AUTH), 400, "'max_tokens' must be"),
    ("unknown model", dict(json={"prompt": "x", "model": "gpt-9"}, headers=AUTH), 404, "does not exist"),
    ("wrong api key", dict(json=GOOD, headers={"Authorization": "Bearer nope"}), 401, "API key"),
    ("no api key", dict(json=GOOD), 401, "API key"),
    ("token id out of vocab", dict(json={"prompt": [10**8]}, headers=AUTH), 400, "token ids"),
    ("n=2", dict(json={"prompt": "x", "n": 2}, headers=AUTH), 400, "n=2"),
    ("batched prompts", dict(json={"prompt": ["a", "b"]}, headers=AUTH), 400, "one prompt per request"),
    ("negative temperature", dict(json={"prompt": "x", "temperature": -1}, headers=AUTH), 400, "temperature"),
]


@pytest.mark.parametrize("name, kwargs, status, fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_input_then_success(server_url, name, kwargs, status, fragment):
    r = httpx.post(server_url + "/v1/completions", timeout=30, **kwargs)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert fragment in err["message"]
    ok = httpx.post(server_url + "/v1/completions", json=GOOD, headers=AUTH, timeout=60)
    assert ok.status_code == 200, ok.text
    assert ok.json()["usage"]["completion_tokens"] >= 1


def test_bad_chat_messages(server_url):
    r = httpx.post(server_url + "/v1/chat/completions", json={"messages": "hi"}, headers=AUTH, timeout=30)
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]


def test_health_and_metrics_need_no_key(server_url):
    assert httpx.get(server_url + "/health").status_code == 200
    assert httpx.get(server_url + "/metrics").status_code == 200
