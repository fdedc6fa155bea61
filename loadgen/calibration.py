"""Text prompts calibrated against the server's own token count.

The server's count is what the figures use (usage.prompt_tokens), so it is the yardstick: vLLM's
/tokenize where the server has it, else the usage of a one-token completion. Prompts are whole
passes over a word pool (loadgen.prompt_text), so a count is linear in the number of passes:

  exact pool (the target's tokenizer): one count gives the server's constant (BOS, a chat
      template); a count that disagrees with the tokenizer means it is not the server's, and the
      pool is built as below;
  English pool: each of PROBE_WORDS words is counted alone; the words that share the commonest
      count form a uniform pool (every word the same number of tokens), and one more count of a
      whole pass gives tokens per word and the constant exactly. Where too few words agree, counts
      of one and two passes fit tokens per word and the constant instead.

Then one prompt of the first level's length is counted, and the relative error kept in the
sizer's calibration (rundir.text_calibration, and so in run.json) as the evidence that input lengths are what was asked.

A count the server accepts and does not answer in time (TargetTimeout: a server that stalls on the
odd request) is asked once more, and nothing is recorded against the server when the second answer
comes; a second timeout stops the sweep with what happened ("did not answer within N s"), not as a
server that could not be reached.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from loadgen.openai_body import request_dict
from loadgen.preflight import Adaptation
from loadgen.prompt_text import TextSizer, relative_error, text_of_words
from loadgen.target_probe import Reply, TargetClient, TargetTimeout
from loadgen.workloads import RequestSpec
from rundir.text_calibration import LengthCheck, TextCalibration, UniformPool

FIT_POOL_WORDS = 64  # a short pool keeps the two fitting prompts small (servers with a short max_model_len)
PROBE_WORDS = 96  # words counted one by one for a uniform pool (one-token requests: cheap)
MIN_UNIFORM_WORDS = 12  # fewer words of the commonest count: fit instead
TOLERANCE = 0.05  # the yardstick: lengths within ±5% by the server's count
CLIENT_SERVER_SLACK = 2  # tokens a tokenizer may differ from the server's count before it is distrusted


class TokenCounter:
    """The server's count of a text prompt, by whichever way this server offers."""

    def __init__(self, client: TargetClient):
        self.client = client
        self.method: str | None = None  # "server /tokenize" | "server usage"
        self._tokenize_works: bool | None = None
        self.retried = 0  # counts asked again after a timeout (nothing wrong recorded)

    def count(self, text: str) -> int | None:
        t = self.client.target
        if self._tokenize_works is not False:
            body = {
                "model": t.model,
                **({"messages": [{"role": "user", "content": text}]} if t.endpoint == "chat" else {"prompt": text}),
            }
            reply = self._post("/tokenize", body)
            n = reply.json.get("count") if reply.ok else None
            self._tokenize_works = isinstance(n, int)
            if isinstance(n, int):
                self.method = "server /tokenize"
                return n
        body = request_dict(RequestSpec(text, 0, 1, 1), t, stream=False)
        body.pop("ignore_eos", None)  # one token either way
        reply = self._post(t.path, body)
        n = (reply.json.get("usage") or {}).get("prompt_tokens") if reply.ok else None
        if isinstance(n, int) and n > 0:
            self.method = "server usage"
            return n
        return None

    def _post(self, path: str, body: dict) -> Reply:
        """One count, asked once more when the server took it and did not answer in time."""
        try:
            return self.client.post(path, body)
        except TargetTimeout:
            self.retried += 1
            return self.client.post(path, body)


def _fit(counter: TokenCounter, sizer: TextSizer) -> TextSizer | None:
    pool = replace(sizer, words=sizer.words[:FIT_POOL_WORDS])
    w = len(pool.words)

    rng = np.random.default_rng(0)
    t1, t2 = counter.count(text_of_words(pool, w, rng)), counter.count(text_of_words(pool, 2 * w, rng))
    if t1 is None or t2 is None or t2 <= t1:
        return None
    per_word = (t2 - t1) / w
    return replace(
        pool,
        tokens_per_word=per_word,
        overhead_tokens=float(t1 - per_word * w),
        exact=False,
        source=counter.method or "server",
        calibration=TextCalibration(fit_counts={w: t1, 2 * w: t2}),
    )


def _uniform(counter: TokenCounter, sizer: TextSizer) -> TextSizer | None:
    """The words that all count the same, with the count and the constant solved exactly."""
    alone: dict[int, list[str]] = {}
    for word in sizer.words[:PROBE_WORDS]:
        n = counter.count(" " + word)
        if n is None:
            return None
        alone.setdefault(n, []).append(word)
    t_one, words = max(alone.items(), key=lambda kv: len(kv[1]))
    if len(words) < MIN_UNIFORM_WORDS:
        return None
    pool = replace(sizer, words=words)
    t_all = counter.count(text_of_words(pool, len(words), np.random.default_rng(0)))
    if t_all is None or (t_all - t_one) % (len(words) - 1):
        return None  # not additive: this server's tokenizer merges across spaces
    per_word = (t_all - t_one) // (len(words) - 1)
    if per_word < 1:
        return None
    return replace(
        pool,
        tokens_per_word=float(per_word),
        overhead_tokens=float(t_one - per_word),
        exact=True,
        source=counter.method or "server",
        calibration=TextCalibration(
            uniform_pool=UniformPool(probed=min(PROBE_WORDS, len(sizer.words)), kept=len(words))
        ),
    )


def calibrate(client: TargetClient, sizer: TextSizer, check_len: int) -> tuple[TextSizer, list[Adaptation]]:
    """`sizer` refined by the server's counts; `check_len`: a length to verify (the first level's)."""

    counter = TokenCounter(client)
    notes: list[Adaptation] = []
    if sizer.exact:
        n = min(len(sizer.words), max(8, check_len // 2))
        measured = counter.count(text_of_words(sizer, n, np.random.default_rng(0)))
        if measured is None:
            return sizer, [
                Adaptation(
                    "input length",
                    "not checked",
                    "the server returns no prompt token count",
                    "prompt lengths follow the client tokenizer, unverified by the server",
                )
            ]
        if abs(measured - sizer.expected_tokens(n)) > CLIENT_SERVER_SLACK + 0.02 * n:
            notes.append(
                Adaptation(
                    "tokenizer",
                    "not the server's",
                    f"{n} one-token words counted {measured} by the server",
                    "prompt lengths are fitted to the server's count instead",
                )
            )
            fitted = _uniform(counter, sizer) or _fit(counter, sizer)
            sizer = fitted if fitted is not None else sizer
        else:
            sizer = replace(sizer, overhead_tokens=float(measured - n), source=f"tokenizer + {counter.method}")
    else:
        fitted = _uniform(counter, sizer) or _fit(counter, sizer)
        if fitted is None:
            return sizer, [
                Adaptation(
                    "input length",
                    "estimated",
                    "the server returns no prompt token count",
                    f"prompt lengths assume {sizer.tokens_per_word:g} tokens per word",
                )
            ]
        sizer = fitted
    n_words = sizer.words_for(check_len)
    measured = counter.count(text_of_words(sizer, n_words, np.random.default_rng(1)))
    if measured is not None:
        err = relative_error(check_len, measured)
        check = LengthCheck(requested=check_len, counted=measured, relative_error=round(err, 4))
        sizer = replace(sizer, calibration=replace(sizer.calibration, check=check))
        if err > TOLERANCE:
            notes.append(
                Adaptation(
                    "input length",
                    "off target",
                    f"{check_len} requested, {measured} counted",
                    f"prompt lengths are {err:.0%} off by the server's count",
                )
            )
    return sizer, notes
