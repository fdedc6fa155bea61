"""Sampling parameters stay within what the sampler can honour, and the sampler turns what still
goes wrong in one row into that request's error (issue 14)."""

from __future__ import annotations

import math

import pytest
import torch

from refengine import SamplingParams
from refengine.errors import RequestFailedError
from refengine.runner.sampler import Sampler, SamplingRow
from refengine.sampling_params import MIN_TEMPERATURE, SamplingParamError

BAD = [
    (dict(temperature=math.nan), "temperature"),
    (dict(temperature=math.inf), "temperature"),
    (dict(temperature=-1), "temperature"),
    (dict(temperature=101), "temperature"),
    (dict(temperature=10**400), "temperature"),
    (dict(temperature="1"), "temperature"),
    (dict(top_p=math.nan), "top_p"),
    (dict(top_p=0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(seed=2**64), "seed"),
    (dict(seed=-(2**63) - 1), "seed"),
    (dict(seed=10**30), "seed"),
    (dict(top_k=2**63), "top_k"),
    (dict(top_k=-2), "top_k"),
    (dict(max_tokens=2**63), "max_tokens"),
    (dict(max_tokens=0), "max_tokens"),
    (dict(min_tokens=-1), "min_tokens"),
    (dict(n=True), "n"),
    (dict(stop=["a"] * 65), "stop"),
    (dict(stop_token_ids=[2**64]), "stop_token_ids"),
    (dict(stop_token_ids=list(range(1025))), "stop_token_ids"),
    (dict(max_tokens=2, min_tokens=3), "min_tokens"),
]


@pytest.mark.parametrize("kwargs, param", BAD, ids=[str(b[0])[:40] for b in BAD])
def test_out_of_range_values_name_their_field(kwargs, param):
    with pytest.raises(SamplingParamError) as err:
        SamplingParams(**kwargs)
    assert err.value.param == param and param in str(err.value)


def test_edges_that_are_honoured():
    assert SamplingParams(temperature=1e-45).temperature == MIN_TEMPERATURE  # as vLLM raises it
    assert SamplingParams(temperature=0).greedy and SamplingParams(temperature=100).temperature == 100.0
    assert SamplingParams(seed=2**64 - 1).seed == 2**64 - 1 and SamplingParams(seed=-(2**63)).seed == -(2**63)
    assert SamplingParams(top_p=1e-300).top_p == 1e-300
    assert SamplingParams(temperature=1).temperature == 1.0 and isinstance(SamplingParams(top_p=1).top_p, float)


def _row(req_id="r", **kwargs) -> SamplingRow:
    return SamplingRow(req_id, SamplingParams(**kwargs), num_output_tokens=0, eos_token_id=2)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(temperature=0.01),
        dict(temperature=0.7, top_p=1e-300),
        dict(temperature=100, min_tokens=2),
        dict(temperature=0.01, top_k=3),
    ],
)
def test_extreme_but_valid_params_sample_the_obvious_token(kwargs):
    logits = torch.randn(1, 64) * 30
    logits[0, 11] = 1e4 if kwargs["temperature"] < 1 else logits[0, 11]
    tokens = Sampler(0, torch.device("cpu"))(logits.clone(), [_row(**kwargs)])
    assert 0 <= tokens[0] < 64 and tokens[0] != 2
    if kwargs["temperature"] < 1:
        assert tokens == [11]


def test_a_row_that_cannot_be_sampled_fails_as_its_own_request():
    logits = torch.randn(2, 8)
    rows = [_row("ok", temperature=0.5), _row("bad", temperature=0.5, min_tokens=1, stop_token_ids=list(range(8)))]
    with pytest.raises(RequestFailedError) as err:  # every token banned before min_tokens
        Sampler(0, torch.device("cpu"))(logits, rows)
    assert err.value.request_id == "bad" and not isinstance(err.value, RuntimeError)
