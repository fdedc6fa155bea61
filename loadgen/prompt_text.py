"""Text prompts of a requested token length, for any server (most take string prompts only).

A prompt is a sequence of words, each written with a leading space. Tokenizers split text at
spaces before they merge (byte-level BPE and SentencePiece alike), so a prompt's token count is
the sum of its words' counts plus a constant the server adds (BOS, a chat template). That makes
sizing exact where a tokenizer is known and a two-number fit where only the server can count:

- with the target's tokenizer (`--tokenizer`, or the embedded engine's own): the word pool is
  words of the tokenizer's own vocabulary that encode as exactly one token, so n words are n
  tokens;
- without one: built-in English words, and the server's own count (usage.prompt_tokens, or
  vLLM's /tokenize) of two prompts gives tokens per word and the constant (loadgen.calibration).

Every prompt is a fresh permutation of whole passes over the pool, then a fixed first part of
it: its count depends only on its length in words, never on the draw, and no two prompts share a
long prefix (a prefix cache cannot make them cheap unless the workload asks for that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from rundir.text_calibration import TextCalibration

CALIBRATION_KEY = "extra"  # where run.json keeps a sizer's calibration (docs/run-format.md)

# Short, frequent English words: one token in most tokenizers with a vocabulary of 30k or more.
ENGLISH_WORDS = tuple(
    dict.fromkeys(
        """
time year people way day man thing woman life child world school state family student group
country problem hand part place case week company system program question work government number
night point home water room mother area money story fact month lot right study book eye job word
business issue side kind head house service friend father power hour game line end member law car
city community name team minute idea kid body back parent face others level office door health
person art war history party result change morning reason research girl guy moment air teacher
force education foot boy age policy music market sense nation plan college interest death
experience effect class control care field development role effort rate heart drug show leader
light voice wife police mind price report decision son view relationship town road arm difference
value building action model season society tax director position player record paper space ground
form event official matter center couple site project activity star table need court oil situation
cost industry figure street image phone data picture practice piece land product doctor wall
patient worker news test movie north love support technology step baby computer type attention
film tree source organization hair window evidence population truth rule river
""".split()
    )
)


@dataclass
class TextSizer:
    """How to write a prompt of n tokens, as plain JSON (it travels to the locust processes)."""

    words: list[str]  # the pool, in its canonical order
    tokens_per_word: float = 1.0  # mean over the pool (exactly 1 for a vocabulary pool)
    overhead_tokens: float = 0.0  # what the server adds to every prompt (BOS, chat template)
    source: str = "built-in estimate"  # tokenizer | server usage | server /tokenize | built-in estimate
    exact: bool = False  # counts known exactly (a vocabulary pool), not fitted
    # The server's counts behind it (loadgen.calibration), for run.json; written under the key
    # `extra`, as it always has been (docs/run-format.md).
    calibration: TextCalibration = field(default_factory=TextCalibration)

    def __post_init__(self) -> None:
        if len(self.words) < 2 or any(not w or " " in w for w in self.words):
            raise ValueError("a text sizer needs at least two words without spaces")
        if not self.tokens_per_word > 0:
            raise ValueError(f"tokens_per_word must be > 0, got {self.tokens_per_word}")

    def words_for(self, n_tokens: int) -> int:
        """How many words make a prompt the server counts as n_tokens (at least one)."""
        return max(1, int(round((n_tokens - self.overhead_tokens) / self.tokens_per_word)))

    def expected_tokens(self, n_words: int) -> float:
        return self.overhead_tokens + n_words * self.tokens_per_word

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "calibration"}
        return {**d, "words": list(self.words), CALIBRATION_KEY: self.calibration.to_dict()}

    @classmethod
    def of(cls, d: "dict[str, Any] | TextSizer") -> "TextSizer":
        if isinstance(d, TextSizer):
            return d
        d = dict(d)
        calibration = TextCalibration.from_dict(d.pop(CALIBRATION_KEY, None))
        return cls(**d, calibration=calibration)


def text_of_words(sizer: TextSizer, n_words: int, rng: np.random.Generator) -> str:
    """n words from the pool: whole passes over the pool in a fresh order each, then the pool's first
    words (in a fresh order): the multiset, and so the token count, depends on n_words only."""
    pool = sizer.words
    full, rest = divmod(n_words, len(pool))
    order = [int(i) for _ in range(full) for i in rng.permutation(len(pool))]
    order += [int(i) for i in rng.permutation(rest)]
    return "".join(" " + pool[i] for i in order)


def text_prompt(sizer: TextSizer, n_tokens: int, rng: np.random.Generator) -> str:
    return text_of_words(sizer, sizer.words_for(n_tokens), rng)


def vocabulary_pool(tokenizer_file: str, max_words: int = 400) -> list[str]:
    """Words of this tokenizer's own vocabulary that encode, space first, as exactly one token, and
    whose concatenation encodes additively (checked on a sample); [] when it has too few."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_file)
    words: list[str] = []
    for tid in sorted(tok.get_vocab().values()):  # by id: in BPE, earlier merges are commoner pieces
        text = tok.decode([tid])
        word = text[1:] if text.startswith(" ") else ""
        if len(word) < 2 or not word.isascii() or not word.isalpha():
            continue
        if tok.encode(" " + word, add_special_tokens=False).ids == [tid]:
            words.append(word)
        if len(words) >= max_words:
            break
    if len(words) < 16:
        return []
    sample = "".join(" " + w for w in words)
    if len(tok.encode(sample, add_special_tokens=False).ids) != len(words):
        return []  # this tokenizer merges across spaces: no exact pool
    return words


def sizer_for_tokenizer(tokenizer_file: str) -> TextSizer | None:
    """An exact sizer from the target's tokenizer (the server's constant is added by calibration)."""
    from tokenizers import Tokenizer

    words = vocabulary_pool(tokenizer_file)
    if not words:
        return None
    tok = Tokenizer.from_file(tokenizer_file)
    specials = len(tok.encode(" " + words[0]).ids) - 1  # BOS/EOS its post-processor adds
    return TextSizer(words=words, tokens_per_word=1.0, overhead_tokens=float(specials), source="tokenizer", exact=True)


def estimated_sizer() -> TextSizer:
    """English words at a typical 1.3 tokens per word: used only until the server has counted."""
    return TextSizer(words=list(ENGLISH_WORDS), tokens_per_word=1.3, overhead_tokens=1.0)


def relative_error(expected: float, measured: float) -> float:
    return math.inf if measured <= 0 else abs(expected - measured) / measured
