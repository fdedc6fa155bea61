"""The CPU layer ops (kernels/cpu_layer_ops.py) against the layers' PyTorch code, float32 and bfloat16.

Covered: RMSNorm with and without the residual add (the residual updated as the PyTorch path
updates it), rows that are a strided split of a wider tensor (q and k out of qkv), sizes that are
not a multiple of the vector width, a bfloat16 weight, positions outside the rotary table (an
error, not a read out of bounds), and the fallback when the kernels are off or the dtype is not
theirs. The reference is the same module with the kernels switched off.
"""

from __future__ import annotations

import pytest
import torch

from refengine.kernels import cpu_layer_ops
from refengine.model.layers.activation import SiluAndMul
from refengine.model.layers.norm import RMSNorm
from refengine.model.layers.rotary import RotaryEmbedding

needs_compiler = pytest.mark.skipif(not cpu_layer_ops.LIBRARY.available(), reason="no C++ compiler here")
DTYPES = [torch.float32, torch.bfloat16]


def _eager(monkeypatch, fn):
    """fn() on the layers' PyTorch code (the kernels switched off for the call)."""
    monkeypatch.setattr(cpu_layer_ops, "ENABLED", False)
    try:
        return fn()
    finally:
        monkeypatch.setattr(cpu_layer_ops, "ENABLED", True)


def _close(got, want, dtype):
    # float32: summation order only; bfloat16: at most one unit in the last place where a sum of
    # squares taken in another order rounds the other way.
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-2, rtol=8e-3)
    torch.testing.assert_close(got, want, **tol)


@needs_compiler
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,hidden", [(1, 64), (3, 1000), (8, 1024), (300, 1030)])
def test_rms_norm_with_and_without_the_residual_matches_pytorch(monkeypatch, dtype, rows, hidden):
    g = torch.Generator().manual_seed(rows * hidden)
    norm = RMSNorm(hidden, 1e-5, params_dtype=dtype)
    norm.weight.data = (torch.rand(hidden, generator=g) + 0.5).to(dtype)
    x = torch.randn(rows, hidden, generator=g).to(dtype)
    residual = torch.randn(rows, hidden, generator=g).to(dtype)
    assert cpu_layer_ops.applies(x)
    _close(norm(x), _eager(monkeypatch, lambda: norm(x)), dtype)
    want, want_res = _eager(monkeypatch, lambda: norm(x, residual.clone()))
    res = residual.clone()
    got, got_res = norm(x, res)
    assert got_res is res  # the stream is updated in place, not copied
    torch.testing.assert_close(got_res, want_res, atol=0, rtol=0)  # one rounded add: identical
    _close(got, want, dtype)


@needs_compiler
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim", [16, 48, 64, 128])
def test_rope_of_strided_q_and_k_matches_pytorch_and_leaves_its_input(monkeypatch, dtype, head_dim):
    heads, kv_heads, t = 4, 2, 8
    g = torch.Generator().manual_seed(head_dim)
    rope = RotaryEmbedding(
        head_dim, 512, 10000.0, {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 256}
    )
    qkv = torch.randn(t, (heads + 2 * kv_heads) * head_dim, generator=g).to(dtype)
    q, k, _ = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    assert q.stride(0) != q.shape[1]  # a strided split, as the attention layer has it
    before = qkv.clone()
    positions = torch.tensor([0, 1, 2, 100, 7, 511, 3, 64])
    want_q, want_k = _eager(monkeypatch, lambda: rope(positions, q, k))
    got_q, got_k = rope(positions, q, k)
    _close(got_q, want_q, dtype)
    _close(got_k, want_k, dtype)
    torch.testing.assert_close(qkv, before, atol=0, rtol=0)


@needs_compiler
def test_a_position_outside_the_rotary_table_is_an_error_not_a_wild_read():
    rope = RotaryEmbedding(16, 32, 10000.0)
    q, k = torch.randn(2, 64), torch.randn(2, 32)
    with pytest.raises(IndexError, match="outside the rotary table"):
        rope(torch.tensor([3, 32]), q, k)
    with pytest.raises(IndexError):
        rope(torch.tensor([-1, 0]), q, k)


@needs_compiler
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,inter", [(1, 176), (5, 2816), (8, 100), (300, 1030)])
def test_silu_and_mul_matches_pytorch(monkeypatch, dtype, rows, inter):
    x = (3 * torch.randn(rows, 2 * inter, generator=torch.Generator().manual_seed(inter))).to(dtype)
    act = SiluAndMul()
    _close(act(x), _eager(monkeypatch, lambda: act(x)), dtype)


def test_other_dtypes_and_switched_off_kernels_take_the_pytorch_path(monkeypatch):
    assert not cpu_layer_ops.applies(torch.zeros(2, 4, dtype=torch.float16))
    big = torch.zeros(cpu_layer_ops.MAX_ROWS_BESIDE_MANY_THREADS + 1, 4)  # a prefill's rows
    monkeypatch.setattr(torch, "get_num_threads", lambda: cpu_layer_ops.MEASURED_THREADS + 1)
    assert not cpu_layer_ops.applies(big)  # beside a wide OpenMP team: the PyTorch chain, split over it
    assert cpu_layer_ops.applies(big[:8]) == cpu_layer_ops.LIBRARY.available()  # a decode's rows: the kernels
    monkeypatch.setattr(torch, "get_num_threads", lambda: cpu_layer_ops.MEASURED_THREADS)
    assert cpu_layer_ops.applies(big) == cpu_layer_ops.LIBRARY.available()  # measured: the kernels win
    monkeypatch.undo()
    monkeypatch.setattr(cpu_layer_ops, "ENABLED", False)
    assert not cpu_layer_ops.applies(torch.zeros(2, 4))

    def no_kernel(*args, **kwargs):
        raise AssertionError("a kernel ran though the kernels are off")

    for name in ("add_rms_norm", "rope", "silu_and_mul"):
        monkeypatch.setattr(cpu_layer_ops, name, no_kernel)
    norm, rope = RMSNorm(8), RotaryEmbedding(8, 16, 10000.0)
    x = torch.randn(3, 8)
    assert norm(x).shape == (3, 8) and norm(x, torch.randn(3, 8))[0].shape == (3, 8)
    assert rope(torch.tensor([0, 1, 2]), x, x)[0].shape == (3, 8)
    assert SiluAndMul()(x).shape == (3, 4)


def test_a_weight_of_another_dtype_than_the_input_takes_the_pytorch_path(monkeypatch):
    """A float32 weight on bfloat16 rows promotes to float32 in PyTorch; the kernel would round to bfloat16."""
    norm = RMSNorm(8)  # float32 weight
    x = torch.randn(2, 8).to(torch.bfloat16)
    assert norm(x).dtype == torch.float32
