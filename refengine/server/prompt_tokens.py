"""Prompt → token ids for the server: off the event loop, and no more tokenizing than it takes.

Tokenizing 10 MB of text costs about 10 s of CPU. The server runs it in a worker thread (the
tokenizers library releases the GIL while it works, so /health keeps answering), and refuses a
prompt that cannot fit `max_model_len` from a prefix: the first 64 Ki characters, then four
times more each round, until a prefix alone holds more than 2 × max_model_len + 64 tokens. A
tokenizer splits text into words (or pieces) before merging, so a prefix's count differs from
its share of the whole prompt only around the cut: far less than that margin.
"""

from __future__ import annotations

from refengine.errors import RefEngineError

PROBE_CHARS = 1 << 16


def too_long_by_prefix(tokenizer, text: str, max_model_len: int) -> tuple[int, int] | None:
    """(tokens, characters) of the first prefix that proves `text` cannot fit, or None."""
    probe = PROBE_CHARS
    while probe < len(text):
        n = tokenizer.count(text[:probe])
        if n > 2 * max_model_len + 64:
            return n, probe
        probe *= 4
    return None


def prompt_ids(engine, prompt: str | list[int], chat: bool) -> list[int]:
    """Token ids of a prompt (text or ids), length-checked; RefEngineError if it is unusable.
    Reads only the tokenizer and the engine's configuration, so any thread may call it."""
    tok = engine.tokenizer
    if isinstance(prompt, str) and tok is not None:
        hit = too_long_by_prefix(tok, prompt, engine.max_model_len)
        if hit is not None:
            raise RefEngineError(
                f"the prompt has more than {hit[0]} tokens (counted in its first {hit[1]} of {len(prompt)} "
                f"characters) but max_model_len is {engine.max_model_len}; shorten the prompt or raise max_model_len"
            )
    if chat:
        ids = tok.encode(prompt, add_bos=False)  # chat templates write the BOS themselves
    else:
        _, ids = engine.encode_prompt(prompt)
    engine.check_prompt_length(ids)
    return ids
