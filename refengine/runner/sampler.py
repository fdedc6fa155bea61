"""Token sampling: greedy, temperature, top-k, top-p, per-request seeds, min_tokens.

Greedy rows are done in one argmax. Sampled rows are drawn together by inverse transform: each
row's distribution (temperature, then its top-k / top-p where set) is summed into a CDF, and one
uniform number per row picks the first token whose cumulative mass exceeds it. One random number
per row, not one per vocabulary entry: torch.multinomial (and the exponential race vLLM uses)
draws a random number for every token of the vocabulary, one request at a time: 148 ms a step at 64
sequences of a 128k vocabulary, 4.5 ms this way (bench/sampler.py; docs/engine.md, "Sampling").
The search is in float64, in two levels (runner/inverse_transform.py), so the smallest
probabilities keep their share.

A request with its own seed draws its number from its own torch.Generator (the same tokens
whatever else is in the batch); the others draw theirs from the engine's generator in row order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from refengine.errors import RequestFailedError
from refengine.runner.inverse_transform import draw
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
        greedy = [i for i, row in enumerate(rows) if row.params.greedy]
        sampled = [i for i, row in enumerate(rows) if not row.params.greedy]
        tokens = [0] * len(rows)
        if greedy:  # (an argmax over a 128k vocabulary is not free: only the rows that need it)
            picked = torch.argmax(logits if len(greedy) == len(rows) else logits[greedy], dim=-1).tolist()
            for i, token in zip(greedy, picked):
                tokens[i] = token
        if sampled:
            for i, token in zip(sampled, self._sample(logits, rows, sampled)):
                tokens[i] = token
        return tokens

    def _sample(self, logits: torch.Tensor, rows: list[SamplingRow], sampled: list[int]) -> list[int]:
        """One token for each row in `sampled`. Should drawing them together fail unexpectedly (a
        bug for some odd parameters), each row is drawn alone to find whose it is: one row's
        failure is that request's, not the batch's."""
        try:
            return self._draw(logits, rows, sampled)
        except RequestFailedError:
            raise
        except Exception:
            for i in sampled:
                try:
                    self._draw(logits, rows, [i])
                except RequestFailedError:
                    raise
                except Exception as exc:
                    raise RequestFailedError(rows[i].req_id, f"sampling failed: {exc}") from exc
            raise

    def _draw(self, logits: torch.Tensor, rows: list[SamplingRow], sampled: list[int]) -> list[int]:
        """One token for each row in `sampled`, by inverse transform on the rows' CDFs at once."""
        temps = torch.tensor([rows[i].params.temperature for i in sampled], dtype=logits.dtype, device=logits.device)
        mine = logits if len(sampled) == len(rows) else logits[sampled]
        probs = torch.softmax(mine if bool((temps == 1).all()) else mine / temps[:, None], dim=-1)
        for k, i in enumerate(sampled):
            p = rows[i].params
            if 0 < p.top_k < logits.shape[-1] or p.top_p < 1.0:
                probs[k] = self._truncated(logits[i] / p.temperature, p)
        total = probs.sum(dim=-1)
        # On CUDA, sampling NaN or all-zero weights is a device-side assert that kills the whole
        # context; checking here keeps it the one request's error.
        bad = ~(torch.isfinite(total) & (total > 0))
        if bool(bad.any()):
            k = int(bad.nonzero()[0, 0])
            raise RequestFailedError(
                rows[sampled[k]].req_id,
                "sampling failed: the sampling distribution has no finite positive mass (every token "
                "banned, or the logits are not finite)",
            )
        return draw(probs, self._uniforms([rows[i] for i in sampled]).to(probs.device)).tolist()

    def _uniforms(self, rows: list[SamplingRow]) -> torch.Tensor:
        """One number in [0, 1) per row (float64): from the row's own generator where it has a seed,
        from the engine's in row order otherwise (one call for all of those)."""
        shared = [k for k, row in enumerate(rows) if row.params.seed is None]
        u = torch.empty(len(rows), dtype=torch.float64, device=self.device)
        if shared:
            u[shared] = torch.rand(
                len(shared), generator=self._default_generator, dtype=torch.float64, device=self.device
            )
        for k, row in enumerate(rows):
            if row.params.seed is not None:
                u[k] = torch.rand(1, generator=self._generator(row), dtype=torch.float64, device=self.device)[0]
        return u

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

    @staticmethod
    def _truncated(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
        """One row's distribution under its top-k, then its top-p (logits already / temperature)."""
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
        return probs
