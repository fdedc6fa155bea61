"""Tokenizer: a thin wrapper over `tokenizers` (tokenizer.json) plus tokenizer_config.json.

The engine works in token ids; text enters and leaves through here. No transformers import on
this path, so a tokenizer loads in milliseconds.

Also here, for streaming:
- `IncrementalDetokenizer`: feed new token ids, get exactly the new text. A character can span
  several byte-level tokens, so text is decoded over a small window of recent tokens
  ([prefix_offset, read_offset) is what was already emitted, decoded for context) and held back
  while it ends in U+FFFD, the replacement character an incomplete UTF-8 sequence decodes to.
  Decoding a window rather than single tokens also keeps sentencepiece-style leading spaces right.
- `find_stop`: where to cut generated text at the first stop string (excluded from the output).
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer

from refengine.errors import RefEngineError

REPLACEMENT_CHAR = "\ufffd"


def _token_str(value) -> str | None:
    """tokenizer_config.json spells special tokens as a string or an AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value


class Tokenizer:
    def __init__(self, tokenizer_file: str | Path, config: dict | None = None):
        self._tok = _HFTokenizer.from_file(str(tokenizer_file))
        config = config or {}
        self.bos_token = _token_str(config.get("bos_token"))
        self.eos_token = _token_str(config.get("eos_token"))
        self.pad_token = _token_str(config.get("pad_token"))
        self.bos_token_id = self._tok.token_to_id(self.bos_token) if self.bos_token else None
        self.eos_token_id = self._tok.token_to_id(self.eos_token) if self.eos_token else None
        self.pad_token_id = self._tok.token_to_id(self.pad_token) if self.pad_token else None
        # Llama/Mistral prepend BOS, Qwen2 has none; tokenizer_config says which when it can.
        self.add_bos_token = bool(config.get("add_bos_token", self.bos_token_id is not None))
        template = config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            template = next(
                (t["template"] for t in template if t.get("name") == "default"),
                template[0]["template"] if template else None,
            )
        self.chat_template: str | None = template

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def _encode(self, text: str):
        # encode() holds the GIL for its whole run (seconds for megabytes of text); encode_batch
        # releases it, so a long prompt tokenized in a worker thread leaves the server's event loop
        # and the engine thread running. Same pipeline, same ids.
        if len(text) > 4096:
            return self._tok.encode_batch([text], add_special_tokens=False)[0]
        return self._tok.encode(text, add_special_tokens=False)

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Text -> ids. add_bos=None follows tokenizer_config's add_bos_token."""
        ids = self._encode(text).ids
        if add_bos is None:
            add_bos = self.add_bos_token
        if add_bos and self.bos_token_id is not None:
            ids = [self.bos_token_id] + ids
        return ids

    def count(self, text: str) -> int:
        """How many tokens `text` encodes to (no BOS), without building the Python list of ids."""
        return len(self._encode(text))

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """Render messages with the model's Jinja chat template; encode the result with add_bos=False
        (templates write the BOS themselves)."""
        if not self.chat_template:
            raise RefEngineError(
                "this model's tokenizer_config.json has no chat_template; "
                "use /v1/completions with a plain prompt instead"
            )
        import jinja2  # only needed for chat

        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        return env.from_string(self.chat_template).render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
        )


def load_tokenizer(model_dir: str | Path) -> Tokenizer | None:
    """The directory's tokenizer, or None when it has no tokenizer.json (token-id prompts still work)."""
    model_dir = Path(model_dir)
    tok_file = model_dir / "tokenizer.json"
    if not tok_file.is_file():
        return None
    config = {}
    cfg_file = model_dir / "tokenizer_config.json"
    if cfg_file.is_file():
        try:
            config = json.loads(cfg_file.read_text())
        except json.JSONDecodeError as e:
            raise RefEngineError(f"{cfg_file} is not valid JSON: {e}") from None
    try:
        return Tokenizer(tok_file, config)
    except Exception as e:  # noqa: BLE001 - the tokenizers library raises a bare Exception on a bad file
        raise RefEngineError(f"cannot load {tok_file}: {e}") from None


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas, never emitting half a character."""

    def __init__(self, tokenizer: Tokenizer, prompt_ids: list[int] | None = None, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        # A few prompt tokens give the first generated token its left context (leading spaces).
        self.tokens: list[int] = list(prompt_ids or [])[-6:]
        self.prefix_offset = max(len(self.tokens) - 5, 0)
        self.read_offset = len(self.tokens)
        self.text = ""  # everything emitted so far

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def step(self, new_ids: list[int]) -> str:
        """Add generated ids; return the text they complete (may be "" while a character is partial)."""
        self.tokens.extend(new_ids)
        prefix_text = self._decode(self.tokens[self.prefix_offset : self.read_offset])
        new_text = self._decode(self.tokens[self.prefix_offset :])
        if len(new_text) <= len(prefix_text) or new_text.endswith(REPLACEMENT_CHAR):
            return ""  # nothing complete yet: keep the window open
        delta = new_text[len(prefix_text) :]
        self.prefix_offset, self.read_offset = self.read_offset, len(self.tokens)
        self.text += delta
        return delta

    def flush(self) -> str:
        """At the end of generation: emit whatever is held back (even if it ends in U+FFFD)."""
        prefix_text = self._decode(self.tokens[self.prefix_offset : self.read_offset])
        new_text = self._decode(self.tokens[self.prefix_offset :])
        delta = new_text[len(prefix_text) :] if len(new_text) > len(prefix_text) else ""
        self.prefix_offset, self.read_offset = self.read_offset, len(self.tokens)
        self.text += delta
        return delta


def find_stop(text: str, stop_strings: list[str], start: int = 0) -> int | None:
    """Index at which to cut `text` so it ends before the earliest stop string, or None.

    `start` is where the text not yet checked begins; the search starts a stop string's length
    earlier so a stop string split across two deltas is still found."""
    cut = None
    for stop in stop_strings:
        if not stop:
            continue
        i = text.find(stop, max(0, start - len(stop) + 1))
        if i != -1 and (cut is None or i < cut):
            cut = i
    return cut
