"""The equality checks of test_equality.py on NCCL, one rank per GPU (needs two CUDA GPUs)."""

import pytest
import torch
from dist_harness import reference_logits, run_layouts

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs for NCCL ranks")
def test_tp_pp_ep_on_nccl_match_one_gpu(llama_dir, mixtral_dir, tmp_path):
    cases = [
        ("tp2", llama_dir, dict(tensor_parallel_size=2, backend="nccl")),
        ("pp2", llama_dir, dict(pipeline_parallel_size=2, micro_batches=2, backend="nccl")),
        ("ep2", mixtral_dir, dict(tensor_parallel_size=2, enable_expert_parallel=True, backend="nccl")),
    ]
    results = run_layouts(cases, str(tmp_path), device_type="cuda", backend="nccl")
    for name, model_dir, _ in cases:
        want, _ = reference_logits(model_dir, device="cuda")
        (got,) = [r["logits"] for r in results[name].values() if r["logits"]]
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w.cpu(), atol=1e-3, rtol=1e-3)  # TF32-free float32, NCCL sum order
            assert torch.equal(g.argmax(-1), w.cpu().argmax(-1))
