"""Reading ShareGPT-format conversation files: the prompts of the `sharegpt` workload.

Format (the one vLLM's and SGLang's benchmarks use): a JSON list, or JSON Lines, of
    {"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}, ...]}
The prompt is the first human turn; the reply is the gpt turn that follows it (its length sets
the output length when a tokenizer is known). Entries without a human turn are skipped.
"""

from __future__ import annotations

import json
import os
from typing import Callable

from loadgen.errors import WorkloadError

HUMAN = ("human", "user")
ASSISTANT = ("gpt", "assistant", "chatgpt", "model")


def load_sharegpt(path: str | os.PathLike) -> list[tuple[str, str | None]]:
    """(prompt, reply or None) per usable conversation, in file order."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise WorkloadError(f"ShareGPT file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"cannot read ShareGPT file {path}: {exc}") from None
    entries = _parse(text, str(path))
    out = []
    for n, entry in enumerate(entries):
        convs = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(convs, list):
            raise WorkloadError(f"{path}: entry {n} has no 'conversations' list (is this a ShareGPT file?)")
        pair = _first_exchange(convs)
        if pair is not None:
            out.append(pair)
    if not out:
        raise WorkloadError(f"{path}: no conversation has a non-empty human turn")
    return out


def _parse(text: str, path: str) -> list:
    stripped = text.lstrip()
    if not stripped:
        raise WorkloadError(f"{path} is empty")
    if stripped[0] == "[":
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{path} is not valid JSON: {exc}") from None
        return data
    entries = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise WorkloadError(f"{path} is neither a JSON list nor JSON Lines (line {lineno}: {exc})") from None
    return entries


def _first_exchange(convs: list) -> tuple[str, str | None] | None:
    for k, turn in enumerate(convs):
        if not isinstance(turn, dict) or turn.get("from") not in HUMAN:
            continue
        prompt = turn.get("value")
        if not isinstance(prompt, str) or not prompt.strip():
            return None
        reply = None
        for later in convs[k + 1 :]:
            if isinstance(later, dict) and later.get("from") in ASSISTANT and isinstance(later.get("value"), str):
                reply = later["value"]
                break
        return prompt, reply
    return None


def tokenizer_length_fn(path: str | os.PathLike) -> Callable[[str], int]:
    """Token counter from a Hugging Face tokenizer.json (or a model directory holding one)."""
    from tokenizers import Tokenizer

    p = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else str(path)
    try:
        tok = Tokenizer.from_file(p)
    except Exception as exc:  # noqa: BLE001 - tokenizers raises a bare Exception for a missing or bad file
        raise WorkloadError(f"cannot load tokenizer {p}: {exc}") from None
    return lambda text: len(tok.encode(text, add_special_tokens=False).ids)
