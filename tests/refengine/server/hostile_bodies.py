"""Hostile OpenAI request bodies, shared by the tests in tests/refengine/server and bench/server_robustness.py:
the inputs issue 14 listed, one by one, and Hypothesis strategies that generate more.

A generated body is mostly well-formed (so the fields are reached) with any field swapped for a
hostile value: wrong types, edges of every numeric range (NaN, ±inf, 1e-45, 2^64, 10^30), lone
surrogates, deep nesting, huge integer literals, and a few raw byte bodies that are not JSON at
all. Each example is (path, body bytes); generations stay short (max_tokens small, unless the
fuzz picks an edge value), so a few hundred examples take seconds.
"""

from __future__ import annotations

import json
import math

from hypothesis import strategies as st

# ----- the inputs issue 14 listed -------------------------------------------------------------

C, CHAT = "/v1/completions", "/v1/chat/completions"
COMPLETION = '{"prompt": "hello", "max_tokens": 3, %s}'
CHAT_BODY = '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, %s}'

# The values that killed the engine loop for good (issue 14 sent 12 such requests), for both
# routes: (fields, status now, param or None).
ENGINE_KILLERS = [
    ('"temperature": NaN', 400, "temperature"),
    ('"temperature": 1e-45', 200, None),  # raised to 0.01, as vLLM does
    ('"temperature": 1e-300', 200, None),
    ('"top_p": 1e-300', 200, None),  # keeps the most likely token
    ('"seed": %d' % 2**64, 400, "seed"),
    ('"seed": %d' % 10**30, 400, "seed"),
    ('"seed": %d' % (-(2**63) - 1), 400, "seed"),
    ('"temperature": Infinity, "min_tokens": 2', 400, "temperature"),
]


DEEP = 100_000
# Bodies that answered a bare 500 with a traceback (issue 14 found 23): (path, raw body, param
# or None, message fragment). Nesting 100,000 deep is a RecursionError inside json.loads itself,
# where no field is known yet.
BARE_500S = [
    (C, '{"prompt": "x", "x": ' + "[" * DEEP + "]" * DEEP + "}", None, "deep"),
    (C, '{"prompt": ' + "[" * DEEP + "]" * DEEP + "}", None, "deep"),
    (CHAT, '{"messages": ' + "[" * DEEP + "]" * DEEP + "}", None, "deep"),
    (C, '{"prompt": "x", "x": ' + '{"a": ' * DEEP + "1" + "}" * DEEP + "}", None, "deep"),
    (CHAT, '{"messages": [], "x": ' + '{"a": ' * DEEP + "1" + "}" * DEEP + "}", None, "deep"),
    (C, '{"prompt": "x", "x": ' + "[" * 65 + "]" * 65 + "}", "x", "more than 64 deep"),
    (C, '{"prompt": "x", "max_tokens": ' + "9" * 5001 + "}", "max_tokens", "64 bits"),
    (
        CHAT,
        '{"messages": [{"role": "user", "content": "x"}], "max_tokens": ' + "9" * 5001 + "}",
        "max_tokens",
        "64 bits",
    ),
    (C, '{"prompt": "x", "seed": -' + "9" * 5001 + "}", "seed", "64 bits"),
    (C, '{"prompt": "\\ud800"}', "prompt", "surrogate"),
    (C, '{"prompt": "abc\\udfffdef", "stream": true}', "prompt", "surrogate"),
    (C, b'{"prompt": "a\xed\xa0\x80b"}', "prompt", "surrogate"),  # the surrogate's bytes, not an escape
    (C, '{"prompt": "x", "stop": ["\\ud800"]}', "stop", "surrogate"),
    (C, '{"prompt": "x", "\\ud800": 1}', "\\ud800", "surrogate"),
    (CHAT, '{"messages": [{"role": "user", "content": "\\ud800"}]}', "messages", "surrogate"),
    (
        CHAT,
        '{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udc00"}]}]}',
        "messages",
        "surrogate",
    ),
    (CHAT, '{"messages": [{"role": "\\ud800", "content": "hi"}]}', "messages", "surrogate"),
    (C, '{"prompt": "x", "model": "\\ud800"}', "model", "surrogate"),
    (CHAT, '{"messages": [{"role": "user", "content": "x"}], "model": "tiny\\udfff"}', "model", "surrogate"),
    (
        CHAT,
        '{"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}',
        "messages",
        "text must be a string",
    ),
    (CHAT, '{"messages": [{"role": "user", "content": [{"type": "text", "text": null}]}]}', "messages", "got null"),
    (CHAT, '{"messages": [{"role": "user", "content": [{"type": "text", "text": ["a"]}]}]}', "messages", "got list"),
    (CHAT, '{"messages": [{"role": "user", "content": ["just a string"]}]}', "messages", "must be an object"),
]


# ----- generated bodies -----------------------------------------------------------------------

SURROGATES = st.sampled_from(["\ud800", "\udfff", "a\udc00b", "\udbff\udbff", "ok\ud83d"])
TEXT = st.one_of(st.text(max_size=24), st.text(st.characters(exclude_categories=()), max_size=8), SURROGATES)
EDGE_INTS = st.sampled_from(
    [0, 1, -1, -2, 2**31, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30, -(10**30), 4096, 10**6]
)
EDGE_FLOATS = st.sampled_from(
    [
        0.0,
        -0.0,
        5e-324,
        1e-45,
        1e-300,
        1e-5,
        0.009,
        0.01,
        0.5,
        1.0,
        2.0,
        100.0,
        100.5,
        1e300,
        1.7e308,
        math.nan,
        math.inf,
        -math.inf,
        -1.0,
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    EDGE_INTS,
    st.integers(),
    EDGE_FLOATS,
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
)
ANY_JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=12
)

FIELDS = {  # a plausible value for each known field; the fuzz makes up to two of them HOSTILE
    "model": st.sampled_from(["tiny-test", "gpt-4"]),
    "max_tokens": st.integers(1, 6),
    "max_completion_tokens": st.integers(1, 6),
    "temperature": st.sampled_from([0, 0.0, 0.7, 1, 1.5]),
    "top_p": st.sampled_from([0.1, 0.9, 1, 1.0]),
    "top_k": st.sampled_from([-1, 0, 1, 50]),
    "seed": st.integers(-(2**63), 2**64 - 1),
    "min_tokens": st.integers(0, 3),
    "stop": st.one_of(TEXT, st.lists(TEXT, max_size=3)),
    "stop_token_ids": st.lists(st.integers(0, 4095), max_size=3),
    "ignore_eos": st.booleans(),
    "n": st.just(1),
    "priority": st.integers(-3, 3),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
}


HOSTILE = st.one_of(EDGE_FLOATS, EDGE_INTS, SCALARS, ANY_JSON)


@st.composite
def _fields(draw) -> dict:
    """Known fields with plausible values, and at most two of them hostile: a body that fails only
    on its hostile value reaches as far into the server as a value can."""
    names = draw(st.lists(st.sampled_from(sorted(FIELDS)), unique=True, max_size=6))
    hostile = set(draw(st.lists(st.sampled_from(names), unique=True, max_size=2))) if names else set()
    body = {name: draw(HOSTILE if name in hostile else FIELDS[name]) for name in names}
    if draw(st.booleans()) and "max_tokens" not in body:
        body["max_tokens"] = draw(st.integers(1, 4))
    if draw(st.integers(0, 9)) == 0:
        body[draw(TEXT)] = draw(ANY_JSON)  # an unknown (vendor) field
    return body


PART = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": st.one_of(TEXT, TEXT, ANY_JSON)}),
    st.fixed_dictionaries({"type": st.sampled_from(["image_url", "text", 3]), "text": ANY_JSON}),
    ANY_JSON,
)
ROLE = st.sampled_from(["user", "system", "assistant"])
MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": ROLE, "content": st.text(min_size=1, max_size=24)}),
    st.fixed_dictionaries(
        {
            "role": st.one_of(ROLE, ROLE, TEXT, ANY_JSON),
            "content": st.one_of(TEXT, TEXT, st.lists(PART, max_size=3), ANY_JSON),
        }
    ),
    ANY_JSON,
)
PROMPT = st.one_of(
    st.text(min_size=1, max_size=24),
    st.lists(st.integers(0, 4095), min_size=1, max_size=8),
    TEXT,
    st.lists(st.one_of(EDGE_INTS, st.integers()), max_size=4),
    ANY_JSON,
)


@st.composite
def _json_body(draw) -> tuple[str, bytes]:
    body = draw(_fields())
    if draw(st.booleans()):
        path = "/v1/chat/completions"
        if draw(st.integers(0, 9)):
            body["messages"] = draw(
                st.one_of(
                    st.lists(MESSAGE, min_size=1, max_size=3), st.lists(MESSAGE, min_size=1, max_size=3), ANY_JSON
                )
            )
    else:
        path = "/v1/completions"
        if draw(st.integers(0, 9)):
            body["prompt"] = draw(PROMPT)
    raw = json.dumps(body, allow_nan=True)  # Python writes NaN/Infinity; lone surrogates as \ud800
    if draw(st.integers(0, 7)) == 0:  # an integer literal past Python's 4,300-digit cap
        raw = raw[:-1] + (", " if len(raw) > 2 else "") + f'"max_tokens": {"9" * draw(st.integers(4301, 6000))}}}'
    return path, raw.encode("utf-8", "surrogatepass")


@st.composite
def _raw_body(draw) -> tuple[str, bytes]:
    path = draw(st.sampled_from(["/v1/completions", "/v1/chat/completions"]))
    depth = draw(st.sampled_from([63, 65, 1000, 100_000]))
    kind = draw(st.sampled_from(["array", "object", "truncated", "bytes", "utf8-surrogate", "empty", "scalar"]))
    if kind == "array":
        return path, b'{"prompt": "x", "x": ' + b"[" * depth + b"]" * depth + b"}"
    if kind == "object":
        return path, b'{"prompt": "x", "x": ' + b'{"a": ' * depth + b"1" + b"}" * depth + b"}"
    if kind == "truncated":
        return path, b'{"prompt": "hello", "max_tokens": 2'[: draw(st.integers(0, 33))]
    if kind == "bytes":
        return path, draw(st.binary(max_size=64))
    if kind == "utf8-surrogate":  # the bytes a surrogate would have in UTF-8: json decodes them with surrogatepass
        return path, b'{"prompt": "a\xed\xa0\x80b", "messages": [{"role": "user", "content": "\xed\xbf\xbf"}]}'
    if kind == "empty":
        return path, b""
    return path, json.dumps(draw(SCALARS), allow_nan=True).encode("utf-8", "surrogatepass")


BODIES = st.one_of(_json_body(), _json_body(), _json_body(), _raw_body())
