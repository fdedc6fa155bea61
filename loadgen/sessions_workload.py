"""The `sessions` workload: multi-turn chat conversations whose turns resend their history.

That is how prefix caches are exercised in production: turn t of a conversation is its first
t user messages and replies followed by a new user message, so everything but the newest
message (and the reply before it) is a prefix the server has seen.

Request i belongs to conversation (i // (K x turns)) x K + i mod K and is its turn
(i // K) mod turns, for K = num_sessions conversations open at once: consecutive requests go to
different conversations, and a conversation's next turn comes K requests after its previous one
(with K above the concurrency, usually after that turn's reply has finished). User messages are
`input_len` tokens, replies `output_len`; the replies in the history are the workload's own text
(deterministic), not what the server generated, so the cacheable prefix is each earlier turn's
prompt. On the chat endpoint the history is sent as messages (user / assistant roles); on
completions as one text.
"""

from __future__ import annotations

import numpy as np

from loadgen.errors import WorkloadError
from loadgen.prompt_text import TextSizer, estimated_sizer, text_of_words
from loadgen.request_spec import RequestSpec, Workload


def sessions_specs(o):
    if o.turns < 1 or o.num_sessions < 1:
        raise WorkloadError("sessions need turns >= 1 and num_sessions >= 1")
    if o.prompt_format != "text":
        raise WorkloadError("the sessions workload sends text (a chat history): use --prompt-format text")
    sizer = TextSizer.of(o.text_sizer) if o.text_sizer else estimated_sizer()
    k, turns = o.num_sessions, o.turns
    # The server's constant goes with the first message only; later pieces are words alone.
    first_words = sizer.words_for(o.input_len)
    user_words = max(1, int(round(o.input_len / sizer.tokens_per_word)))
    reply_words = max(1, int(round(o.output_len / sizer.tokens_per_word)))

    def piece(conv: int, turn: int, role: int, n_words: int) -> str:
        return text_of_words(sizer, n_words, np.random.default_rng([o.seed & 0xFFFFFFFF, 9, conv, turn, role]))

    def make(i: int) -> RequestSpec:
        rnd = i // k
        conv, turn = (rnd // turns) * k + i % k, rnd % turns
        messages, n_words = [], 0
        for t in range(turn + 1):
            words = first_words if t == 0 else user_words
            messages.append({"role": "user", "content": piece(conv, t, 0, words)})
            n_words += words
            if t < turn:
                messages.append({"role": "assistant", "content": piece(conv, t, 1, reply_words)})
                n_words += reply_words
        n_in = (turn + 1) * o.input_len + turn * o.output_len
        count = int(round(sizer.expected_tokens(n_words))) if sizer.exact else None
        return RequestSpec(
            "".join(m["content"] for m in messages),
            n_in,
            o.output_len,
            o.output_len,
            dict(o.extra_body),
            client_prompt_tokens=count,
            messages=messages,
            extra_meta={"session": conv, "turn": turn},
        )

    return Workload(o, make, None)
