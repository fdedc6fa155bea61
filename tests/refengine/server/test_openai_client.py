"""The official openai client drives the server as it drives vLLM."""

import openai
import pytest

from refengine import LLM, SamplingParams


@pytest.fixture(scope="module")
def client(server_url):
    return openai.OpenAI(base_url=server_url + "/v1", api_key="sekret", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def offline():
    return LLM(model="tiny-test", max_model_len=256)


def test_models(client):
    assert [m.id for m in client.models.list()] == ["tiny-test"]


def test_streaming_completion_matches_offline_generate(client, offline):
    prompt = "the quick brown fox"
    stream = client.completions.create(
        model="tiny-test",
        prompt=prompt,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    texts, usage, reasons = [], None, []
    for ch in stream:
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            texts.append(c.text)
            reasons.append(c.finish_reason)
    expected = offline.generate([prompt], SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))[0]
    assert "".join(texts) == expected.outputs[0].text
    assert usage.completion_tokens == 12 and usage.prompt_tokens == len(expected.prompt_token_ids)
    assert usage.total_tokens == usage.prompt_tokens + 12
    assert reasons[-1] == "length" and all(r is None for r in reasons[:-1])


def test_non_streaming_completion_with_token_ids(client, offline):
    ids = [5, 17, 300, 42, 9]
    resp = client.completions.create(
        model="tiny-test", prompt=ids, max_tokens=8, temperature=0, extra_body={"ignore_eos": True}
    )
    expected = offline.generate([ids], SamplingParams(max_tokens=8, temperature=0, ignore_eos=True))[0]
    assert resp.choices[0].text == expected.outputs[0].text
    assert resp.usage.prompt_tokens == 5 and resp.usage.completion_tokens == 8


def test_streaming_chat(client):
    stream = client.chat.completions.create(
        model="tiny-test",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        max_tokens=10,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    content = [c.choices[0].delta.content for c in chunks if c.choices]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content  # the first chunk already carries a token
    assert chunks[-1].usage.completion_tokens == 10
    assert "".join(x or "" for x in content)


def test_non_streaming_chat(client):
    resp = client.chat.completions.create(
        model="tiny-test",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=5,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert resp.choices[0].message.role == "assistant"
    assert resp.usage.completion_tokens == 5 and resp.choices[0].finish_reason == "length"


def test_raw_sse_ends_with_done(server_url):
    import httpx

    with httpx.stream(
        "POST",
        server_url + "/v1/completions",
        headers={"Authorization": "Bearer sekret"},
        json={
            "prompt": "abc",
            "max_tokens": 4,
            "stream": True,
            "ignore_eos": True,
            "temperature": 0,
            "some_vendor_field": {"x": 1},
        },
        timeout=60,
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    assert len(lines) >= 3
