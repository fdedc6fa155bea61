"""Plan math: the seed's bubble and all-reduce figures, and the decision procedure's picks."""

import pytest

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.memory import MiB, ServingPlan, allreduce_bytes
from analyzers.model.presets import PRESETS
from analyzers.plan.parallel import Cluster, decision_steps, pipeline_bubble, rank_plans, ring_allreduce_seconds


def test_seed_bubble_figures():
    assert pipeline_bubble(8, 16) == pytest.approx(7 / 23) and round(pipeline_bubble(8, 16), 2) == 0.30
    assert pipeline_bubble(8, 32) == pytest.approx(7 / 39) and round(pipeline_bubble(8, 32), 2) == 0.18
    assert pipeline_bubble(1, 16) == 0
    with pytest.raises(DiagnosisError):
        pipeline_bubble(0, 4)


def test_seed_allreduce_figure():
    # hidden 8192 x 2048 tokens x FP16 = 32 MiB ("over 30 MB").
    plan = ServingPlan(weight_dtype="fp16", max_num_batched_tokens=2048)
    one = allreduce_bytes(PRESETS["llama-3-70b"], plan)
    assert one == 32 * MiB
    # Ring all-reduce on 8 GPUs moves 2 x 7/8 of it per link: at 450 GB/s ~0.13 ms ("a few tenths of a ms"),
    # at 50 GB/s across nodes ten times longer.
    assert ring_allreduce_seconds(one, 8, 450) == pytest.approx(one * 1.75 / 450e9)
    assert ring_allreduce_seconds(one, 8, 50) == pytest.approx(9 * ring_allreduce_seconds(one, 8, 450))
    assert ring_allreduce_seconds(one, 1, 450) == 0


def test_small_model_fits_on_one_card():
    shape = PRESETS["llama-3-8b"]
    cluster = Cluster(nodes=1, gpus_per_node=8)
    ranked = rank_plans(shape, cluster, ServingPlan(concurrency=32))
    best = ranked[0]
    assert (best.tp, best.pp, best.weight_dtype, best.replicas) == (1, 1, "bf16", 8)
    assert decision_steps(shape, cluster, ranked, "bf16")[0].startswith("1. one card: fits in bf16")


def test_70b_needs_tp_and_pp_when_the_concurrency_target_is_high():
    shape = PRESETS["llama-3-70b"]
    cluster = Cluster(nodes=2, gpus_per_node=8)
    base = ServingPlan(concurrency=32, max_model_len=4096)
    ranked = rank_plans(shape, cluster, base, quantize=False)
    assert all(c.estimate.loads for c in ranked)
    assert not any(c.gpus_per_replica == 1 for c in ranked)  # 141 GB of bf16 weights
    best = ranked[0]
    assert best.meets_target and not best.tp_crosses_nodes
    # Nothing with fewer GPUs per replica meets the target.
    assert all(not c.meets_target for c in ranked if c.gpus_per_replica < best.gpus_per_replica)
    # With a target only the whole cluster can hold, the plan is TP8 inside a node and PP2 across.
    big = rank_plans(shape, cluster, base.with_(concurrency=600), quantize=False)[0]
    assert (big.tp, big.pp, big.meets_target) == (8, 2, True)
    assert big.bubble == pytest.approx(pipeline_bubble(2, 16))


def test_moe_plans_use_ep_and_count_all_to_all():
    shape = PRESETS["mixtral-8x7b"]
    ranked = rank_plans(shape, Cluster(nodes=1, gpus_per_node=8, gpu_memory_gib=40), ServingPlan(concurrency=8))
    assert not any(c.tp * c.pp < 4 and c.weight_dtype == "bf16" for c in ranked)  # 93 GB of bf16 weights
    tp4 = next(c for c in ranked if c.tp == 4 and c.pp == 1 and c.weight_dtype == "bf16")
    assert tp4.ep and tp4.comm_s_per_step > 2 * shape.num_layers * tp4.allreduce_s
    assert not next(c for c in ranked if c.tp == 1).ep


def test_tp_across_nodes_is_flagged_and_ranked_after_in_node_plans():
    shape = PRESETS["llama-3-70b"]
    ranked = rank_plans(shape, Cluster(nodes=2, gpus_per_node=8), ServingPlan(concurrency=8), quantize=False)
    crossing = [c for c in ranked if c.tp_crosses_nodes]
    assert crossing and all(c.tp == 16 for c in crossing)
    in_node_ok = [i for i, c in enumerate(ranked) if c.meets_target and not c.tp_crosses_nodes]
    assert max(in_node_ok) < min(ranked.index(c) for c in crossing)
