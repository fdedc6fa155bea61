"""The sampler draws from the distribution it is given: each token's frequency over many draws
within 5 standard errors of its softmax probability, top-k / top-p mass never left, zero-probability
tokens never drawn, and a seeded row's tokens independent of what else is in the batch."""

from __future__ import annotations

import math

import pytest
import torch

from refengine.runner.inverse_transform import BLOCK, draw
from refengine.runner.sampler import Sampler, SamplingRow
from refengine.sampling_params import SamplingParams

VOCAB = 64
WANT = {5: 0.5, 17: 0.3, 40: 0.15, 63: 0.04, 0: 0.01}  # the rest: zero probability


def _logits(rows: int) -> torch.Tensor:  # WANT over VOCAB
    logits = torch.full((rows, VOCAB), float("-inf"))
    for token, p in WANT.items():
        logits[:, token] = math.log(p)
    return logits


def _row(req_id: str, **kwargs) -> SamplingRow:
    return SamplingRow(req_id, SamplingParams(**kwargs), num_output_tokens=0, eos_token_id=None)


def _frequencies(tokens: list[int]) -> dict[int, float]:
    n = len(tokens)
    return {t: tokens.count(t) / n for t in set(tokens)}


# Spread over several of the search's blocks, the vocabulary not a multiple of one, the last token used.
SPREAD = {3: 0.2, BLOCK - 1: 0.1, BLOCK: 0.25, 2 * BLOCK + 7: 0.3, 3 * BLOCK + 99: 0.15}
SPREAD_VOCAB = 3 * BLOCK + 100


@pytest.mark.parametrize("want, vocab", [(WANT, VOCAB), (SPREAD, SPREAD_VOCAB)], ids=["one-block", "spread"])
def test_frequencies_match_the_softmax_and_zero_mass_is_never_drawn(want, vocab):
    n = 20_000
    logits = torch.full((n, vocab), float("-inf"))
    for token, p in want.items():
        logits[:, token] = math.log(p)
    tokens = Sampler(0, torch.device("cpu"))(logits, [_row(f"r{i}", temperature=1.0) for i in range(n)])
    got = _frequencies(tokens)
    assert set(got) <= set(want), set(got) - set(want)
    for token, p in want.items():
        se = math.sqrt(p * (1 - p) / n)
        assert abs(got.get(token, 0.0) - p) < 5 * se, (token, got.get(token), p)


def test_the_draw_is_the_first_token_whose_cumulative_mass_exceeds_u():
    """Against a plain float64 CDF at chosen u: block edges, the tail, u next to 1, unnormalized rows."""
    probs = torch.zeros(7, SPREAD_VOCAB)
    for token, p in SPREAD.items():
        probs[:, token] = p * 3.0  # any positive total
    u = torch.tensor([0.0, 0.19999, 0.2000001, 0.54, 0.84, 0.86, 1 - 1e-12], dtype=torch.float64)
    cdf = probs.double().cumsum(-1)
    want = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0]
    assert (
        draw(probs, u).tolist()
        == want.tolist()
        == [3, 3, BLOCK - 1, BLOCK, 2 * BLOCK + 7, 3 * BLOCK + 99, 3 * BLOCK + 99]
    )


def test_temperature_flattens_and_top_k_top_p_cut_the_tail():
    n = 20_000
    sampler = Sampler(1, torch.device("cpu"))
    hot = _frequencies(sampler(_logits(n), [_row(f"h{i}", temperature=2.0) for i in range(n)]))
    # At temperature 2 each probability goes as sqrt(p): 0.01 becomes 0.1 / sum(sqrt(p)) ~ 4.4%.
    z = sum(math.sqrt(p) for p in WANT.values())
    assert abs(hot[0] - math.sqrt(0.01) / z) < 5 * math.sqrt(0.044 / n)
    top2 = _frequencies(sampler(_logits(n), [_row(f"k{i}", temperature=1.0, top_k=2) for i in range(n)]))
    assert set(top2) == {5, 17} and abs(top2[5] - 0.5 / 0.8) < 5 * math.sqrt(0.23 / n)
    nucleus = _frequencies(sampler(_logits(n), [_row(f"p{i}", temperature=1.0, top_p=0.7) for i in range(n)]))
    assert set(nucleus) == {5, 17}  # 0.5 < 0.7 <= 0.5 + 0.3


def test_a_seeded_row_draws_the_same_tokens_whatever_else_is_in_the_batch():
    def run(batch_with: int) -> list[int]:
        sampler = Sampler(7, torch.device("cpu"))
        out = []
        for _ in range(50):  # 50 steps, the seeded request at row `batch_with` among others
            rows = [_row(f"o{i}", temperature=1.0) for i in range(batch_with)] + [_row("s", temperature=1.0, seed=42)]
            rows += [_row("t", temperature=0.5, top_k=3)]
            out.append(sampler(_logits(len(rows)), rows)[batch_with])
        return out

    alone, crowded = run(0), run(9)
    assert alone == crowded and len(set(alone)) > 1  # the same draws, and they do vary
