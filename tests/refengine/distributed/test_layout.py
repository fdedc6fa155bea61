"""The parallel layout: rank numbering, stage split, micro-batches, and clear errors for bad layouts."""

import pytest

from refengine.core.outputs import ScheduledRequest
from refengine.distributed.pipeline_runner import split_micro_batches
from refengine.errors import RefEngineError
from refengine.model.hf_config import ModelConfig
from refengine.parallel.layout import ParallelConfig, validate_layout
from refengine.sampling_params import SamplingParams


def _cfg(**kw):
    base = dict(
        architecture="LlamaForCausalLM",
        model_type="llama",
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=96,
        vocab_size=250,
    )
    return ModelConfig(**{**base, **kw})


def test_rank_numbering_is_pp_major():
    pc = ParallelConfig(tensor_parallel_size=2, pipeline_parallel_size=2)
    infos = [pc.rank_info(r) for r in range(4)]
    assert [(i.pp_rank, i.tp_rank) for i in infos] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [i.samples for i in infos] == [False, False, True, False]
    assert infos[1].stage_rank(1) == 3 and infos[0].sampler_rank == 2


def test_stage_split_balanced_and_overridden():
    assert ParallelConfig(pipeline_parallel_size=3).stage_layers(8) == [(0, 3), (3, 6), (6, 8)]
    assert ParallelConfig(pipeline_parallel_size=2, layer_partition=(1, 3)).stage_layers(4) == [(0, 1), (1, 4)]


@pytest.mark.parametrize(
    "layout, cfg, message",
    [
        (dict(tensor_parallel_size=3), {}, "num_attention_heads (4) is not divisible by tensor_parallel_size=3"),
        (dict(tensor_parallel_size=2), {"intermediate_size": 97}, "intermediate_size (97)"),
        (dict(tensor_parallel_size=4), {"num_key_value_heads": 4, "num_attention_heads": 8}, None),
        (dict(tensor_parallel_size=2), {"num_key_value_heads": 3, "num_attention_heads": 6}, "num_key_value_heads (3)"),
        (dict(pipeline_parallel_size=5), {}, "exceeds num_hidden_layers (4)"),
        (dict(pipeline_parallel_size=2, layer_partition=(1, 2)), {}, "summing to num_hidden_layers (4)"),
        (dict(tensor_parallel_size=2, enable_expert_parallel=True), {}, "needs a mixture-of-experts model"),
        (
            dict(tensor_parallel_size=2, enable_expert_parallel=True),
            {"architecture": "MixtralForCausalLM", "num_experts": 3, "num_experts_per_tok": 2},
            "num_local_experts (3)",
        ),
    ],
)
def test_bad_layouts_are_one_line_errors(layout, cfg, message):
    if message is None:
        validate_layout(_cfg(**cfg), ParallelConfig(**layout))
        return
    with pytest.raises(RefEngineError, match=message.replace("(", r"\(").replace(")", r"\)")) as e:
        validate_layout(_cfg(**cfg), ParallelConfig(**layout))
    assert "\n" not in str(e.value)


def test_micro_batches_keep_order_and_balance_tokens():
    sp = SamplingParams()
    reqs = [ScheduledRequest(str(i), [1] * n, 0, [], True, sp) for i, n in enumerate([10, 1, 1, 1, 6, 1])]
    groups = split_micro_batches(reqs, 2)
    assert [r.req_id for g in groups for r in g] == [str(i) for i in range(6)]
    assert len(groups) == 2 and [sum(r.num_tokens for r in g) for g in groups] == [10, 10]
    assert len(split_micro_batches(reqs[:1], 4)) == 1
    assert [len(g) for g in split_micro_batches(reqs[:3], 3)] == [1, 1, 1]
