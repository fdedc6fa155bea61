"""Prompt tokenizing for the server: long texts leave the GIL to others, a prompt that cannot fit is
refused from a prefix, and a prompt that can is tokenized exactly as the engine would."""

from __future__ import annotations

import threading
import time

import pytest

from refengine.config import EngineArgs
from refengine.engine import LLMEngine
from refengine.errors import RefEngineError
from refengine.server.prompt_tokens import PROBE_CHARS, prompt_ids, too_long_by_prefix

TEXT = "the quick brown fox jumps over the lazy dog. "


@pytest.fixture(scope="module")
def engine():
    return LLMEngine(EngineArgs(model="tiny-test", max_model_len=256))


def test_tokenizing_a_long_text_in_a_thread_leaves_the_gil(engine):
    text = (TEXT * 20_000)[:800_000]
    started, done = threading.Event(), threading.Event()

    def work():
        started.set()
        engine.tokenizer.encode(text)
        done.set()

    threading.Thread(target=work).start()
    started.wait()
    turns = 0
    while not done.is_set():  # holding the GIL, encode() would give this loop no turn until it ends
        time.sleep(0.001)
        turns += 1
    assert turns >= 20, turns


def test_long_text_ids_are_the_plain_encoders(engine):
    text = (TEXT + "é€😀\n") * 200
    tok = engine.tokenizer
    assert len(text) > 4096
    assert tok.encode(text) == [tok.bos_token_id] + tok._tok.encode(text, add_special_tokens=False).ids
    assert tok.count(text) == len(tok.encode(text)) - 1


def test_a_prompt_that_cannot_fit_is_refused_from_its_prefix(engine):
    text = TEXT * 250_000  # 11 MB: ~2.5 M tokens
    t0 = time.perf_counter()
    hit = too_long_by_prefix(engine.tokenizer, text, engine.max_model_len)
    assert hit is not None and hit[1] == PROBE_CHARS and time.perf_counter() - t0 < 2.0
    with pytest.raises(RefEngineError, match="more than .* tokens .* max_model_len is 256"):
        prompt_ids(engine, text, chat=False)


def test_prefixes_that_do_not_prove_it_leave_the_verdict_to_the_whole(engine, monkeypatch):
    import refengine.server.prompt_tokens as pt

    monkeypatch.setattr(pt, "PROBE_CHARS", 64)  # so that short texts take several probes
    fits = (TEXT * 20)[:800]  # ~180 tokens: probed at 64 and 256 characters
    assert too_long_by_prefix(engine.tokenizer, fits, 256) is None
    assert 64 * 4 < len(fits) and prompt_ids(engine, fits, chat=False) == engine.encode_prompt(fits)[1]
    over = (TEXT * 50)[:2000]  # ~450 tokens: too many, but no prefix proves it
    assert too_long_by_prefix(engine.tokenizer, over, 256) is None
    with pytest.raises(RefEngineError, match=r"the prompt has \d+ tokens but max_model_len is 256"):
        prompt_ids(engine, over, chat=False)


def test_ids_and_chat_prompts(engine):
    assert prompt_ids(engine, [5, 6, 7], chat=False) == [5, 6, 7]
    assert prompt_ids(engine, "hi", chat=True) == engine.tokenizer.encode("hi", add_bos=False)
    with pytest.raises(RefEngineError, match="empty"):
        prompt_ids(engine, [], chat=False)
