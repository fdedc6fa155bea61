"""Token counts checked against each other: the server's usage, the streamed chunks, the client
tokenizer, the requested output length (docs/metrics.md: a disagreement is reported, not hidden)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rundir.records import ESTIMATED_SOURCES

TOKENIZER_DIFF_NOTE = 0.05  # a mean client-tokenizer difference this large gets a note
# A re-tokenized count may differ from the server's honestly (loadgen/token_count.py): an output
# length judged by it is "other than asked" only beyond this.
TOKENIZER_LENGTH_SLACK = 0.05


@dataclass
class TokenAccounting:
    mismatches: int  # usage vs streamed chunks, either way
    tokenizer_differs: int  # usage vs the client tokenizer
    tokenizer_diff_mean: float | None  # mean (client - server) / server
    prompt_mismatches: int  # prompt usage vs the client's count
    unhonoured: int  # output length other than requested
    notes: list[str] = field(default_factory=list)
    multi_token_chunks: int = 0  # of `mismatches`: fewer chunks than usage tokens (benign)
    longer: int = 0  # of `unhonoured`: more tokens than asked
    estimated: int = 0  # output counts that are estimates (docs/metrics.md)


def account_tokens(col: dict[str, np.ndarray], ok: np.ndarray, requested_output_len: int) -> TokenAccounting:
    """`col`: one level's columns; `ok`: its successful in-window rows."""
    # Usage against what was streamed: exact for servers that send one token per chunk; a count
    # that disagrees there means the server's usage (or its stream) is wrong.
    mismatches = _disagree(col["completion_tokens"][ok], col["client_token_chunks"][ok])
    # Fewer chunks than tokens: the server put several tokens in some chunks (an incremental
    # detokenizer holds a partial character back, a stream interval > 1). Benign, said once.
    multi = int((col["completion_tokens"][ok] > col["client_token_chunks"][ok]).sum())
    tok_differs, tok_diff = _tokenizer_difference(col["completion_tokens"][ok], col["client_completion_tokens"][ok])
    prompt_mismatches = _disagree(col["prompt_tokens"][ok], col["client_prompt_tokens"][ok])
    shorter, longer = _other_lengths(col, ok)
    unhonoured = shorter + longer
    estimated = int((ok & np.isin(col["output_tokens_source"], ESTIMATED_SOURCES)).sum())
    notes = []
    if unhonoured:
        how = ", ".join(
            w
            for k, w in (
                (shorter, f"{shorter} shorter: the server stopped before max_tokens"),
                (longer, f"{longer} longer: it did not honour max_tokens"),
            )
            if k
        )
        notes.append(
            f"{unhonoured} requests did not get the requested {requested_output_len} "
            f"output tokens by the server's count ({how})"
        )
    if estimated:
        notes.append(
            f"output token counts of {estimated} of {int(ok.sum())} requests are estimates (token-carrying "
            "chunks: no usage, no length finish, no client tokenizer), and so are TPOT, the output "
            "lengths and token throughput; pass --tokenizer for a count"
        )
    if mismatches > multi:
        notes.append(
            f"{mismatches - multi} requests streamed more token chunks than the server's usage counts "
            "(usage, or the stream, is wrong)"
        )
    return TokenAccounting(
        mismatches, tok_differs, tok_diff, prompt_mismatches, unhonoured, notes, multi, longer, estimated
    )


def _other_lengths(col: dict[str, np.ndarray], ok: np.ndarray) -> tuple[int, int]:
    """(shorter, longer) than asked among `ok`, judged only where the count says so: the server's
    usage, or the client tokenizer beyond its slack. Never from an estimate, and never for a `length`
    finish: the server stopped because it had made max_tokens."""
    source, finish = col["output_tokens_source"], col["finish_reason"]
    judged = ok & np.isin(source, ("usage", "tokenizer")) & (finish != "length")
    diff = col["out_tokens"] - col["target_output_len"]
    slack = np.where(source == "tokenizer", np.maximum(1.0, TOKENIZER_LENGTH_SLACK * col["target_output_len"]), 0.0)
    return int((judged & (diff < -slack)).sum()), int((judged & (diff > slack)).sum())


def _tokenizer_difference(server: np.ndarray, client: np.ndarray) -> tuple[int, float | None]:
    both = ~np.isnan(server) & ~np.isnan(client) & (server > 0)
    if not both.any():
        return 0, None
    return int((server[both] != client[both]).sum()), float(np.mean((client[both] - server[both]) / server[both]))


def _disagree(server: np.ndarray, client: np.ndarray) -> int:
    both = ~np.isnan(server) & ~np.isnan(client)
    return int((server[both] != client[both]).sum())
