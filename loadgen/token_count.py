"""Client-side token counting: the second count of docs/metrics.md, next to the server's `usage`.

The locust processes ship each finished request's streamed text under COMPLETION_TEXT_KEY (only
when a tokenizer is configured); the parent process counts it here, so tokenizing never takes CPU
from the processes that time the streams. The text itself is not kept in requests.jsonl.

A re-tokenized count can differ from the server's honestly: decoding ids to text and encoding the
text again need not give the same ids (a byte-level BPE merges differently across what were token
boundaries; random token ids, as the random workload's outputs are, make this common). The
analyzers therefore compare server usage with the chunk count exactly, and with this count as a
relative difference.
"""

from __future__ import annotations

from pathlib import Path

from rundir import RequestRecord

COMPLETION_TEXT_KEY = "completion_text"


class ClientTokenCounter:
    """Counts output tokens of streamed text with a Hugging Face tokenizer.json."""

    def __init__(self, tokenizer_path: str | Path):
        from tokenizers import Tokenizer

        path = Path(tokenizer_path)
        self._tok = Tokenizer.from_file(str(path / "tokenizer.json" if path.is_dir() else path))

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids) if text else 0

    def records(self, dicts: list[dict]) -> list[RequestRecord]:
        """RequestRecords from the locust processes' dicts, with client_completion_tokens filled
        (and TPOT re-derived) where the text came along."""
        out = []
        for d in dicts:
            text = d.pop(COMPLETION_TEXT_KEY, None)
            rec = RequestRecord.from_dict(d)
            if text is not None:
                rec.client_completion_tokens = self.count(text)
                rec.derive()
            out.append(rec)
        return out


def records_without_counting(dicts: list[dict]) -> list[RequestRecord]:
    for d in dicts:
        d.pop(COMPLETION_TEXT_KEY, None)
    return [RequestRecord.from_dict(d) for d in dicts]
