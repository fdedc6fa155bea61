"""Per-expert load and capacity overflow reach EngineStats and the Prometheus exposition."""

from types import SimpleNamespace

from refengine import LLM, SamplingParams
from refengine.server.metrics import ServerMetrics


def test_moe_load_is_exported_as_metrics(mixtral_dir):
    llm = LLM(model=mixtral_dir, max_model_len=128, num_gpu_blocks_override=32, block_size=4, moe_capacity_factor=0.5)
    llm.generate([[5, 6, 7, 8, 9, 10, 11]], SamplingParams(max_tokens=3, temperature=0, ignore_eos=True))
    stats = llm.llm_engine.stats()
    # 2 layers x top-2 x (7 prompt tokens + 2 decoded inputs) assignments, some over capacity.
    assert len(stats.moe_expert_tokens) == 4 and sum(stats.moe_expert_tokens) == 2 * 2 * 9
    assert stats.moe_overflow_total > 0
    loop = SimpleNamespace(stats=stats, healthy=True, num_waiting_admitted=0)
    text = ServerMetrics(loop, "m", 4, 32).render().decode()
    assert 'refengine:moe_expert_tokens_total{expert="0",model_name="m"}' in text
    assert "refengine:moe_capacity_overflow_total" in text
