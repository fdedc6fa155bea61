"""Token sampling: greedy, temperature, top-k, top-p, per-request seeds, min_tokens.

Greedy rows are done in one argmax. Sampled rows go one by one because each may carry its own
torch.Generator (a per-request seed must give the same tokens whatever else is in the batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from refengine.errors import RequestFailedError
from refengine.sampling_params import SamplingParams


@dataclass
class SamplingRow:
    req_id: str
    params: SamplingParams
    num_output_tokens: int
    eos_token_id: int | None


class Sampler:
    def __init__(self, seed: int, device: torch.device):
        self.device = device
        self._default_generator = torch.Generator(device=device)
        self._default_generator.manual_seed(seed)
        self._generators: dict[str, torch.Generator] = {}

    def forget(self, req_ids) -> None:
        for req_id in req_ids:
            self._generators.pop(req_id, None)

    def _generator(self, row: SamplingRow) -> torch.Generator:
        if row.params.seed is None:
            return self._default_generator
        gen = self._generators.get(row.req_id)
        if gen is None:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(row.params.seed)
            self._generators[row.req_id] = gen
        return gen

    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow]) -> list[int]:
        assert logits.shape[0] == len(rows), (logits.shape, len(rows))
        logits = logits.float()
        self._suppress_stops_before_min_tokens(logits, rows)
        tokens = torch.argmax(logits, dim=-1).tolist()
        for i, row in enumerate(rows):
            if not row.params.greedy:
                try:
                    tokens[i] = self._sample_one(logits[i], row)
                except Exception as exc:  # one row's failure is that request's, not the batch's
                    raise RequestFailedError(row.req_id, f"sampling failed: {exc}") from exc
        return tokens

    @staticmethod
    def _suppress_stops_before_min_tokens(logits: torch.Tensor, rows: list[SamplingRow]) -> None:
        for i, row in enumerate(rows):
            if row.num_output_tokens >= row.params.min_tokens:
                continue
            banned = list(row.params.stop_ids)
            if row.eos_token_id is not None and not row.params.ignore_eos:
                banned.append(row.eos_token_id)
            banned = [t for t in banned if 0 <= t < logits.shape[1]]
            if banned:
                logits[i, banned] = float("-inf")

    def _sample_one(self, logits: torch.Tensor, row: SamplingRow) -> int:
        p = row.params
        logits = logits / p.temperature
        if 0 < p.top_k < logits.shape[-1]:
            kth = torch.topk(logits, p.top_k).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if p.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
            drop = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) >= p.top_p
            drop[0] = False  # a top_p below float32's smallest value must still keep one token
            sorted_probs = sorted_probs.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
        # On CUDA, multinomial over NaN or all-zero weights is a device-side assert that kills the
        # whole context; checking here keeps it one request's error.
        if not bool(torch.isfinite(probs).all() & (probs.sum() > 0)):
            raise ValueError(
                "the sampling distribution has no finite positive mass (every token banned, "
                "or the logits are not finite)"
            )
        return int(torch.multinomial(probs, 1, generator=self._generator(row)).item())
