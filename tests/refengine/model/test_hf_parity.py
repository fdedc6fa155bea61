"""refengine's Llama-family model against Hugging Face transformers, CPU float32.

Random-weight models of several shapes are saved with save_pretrained (safetensors) and loaded
with refengine's loader; logits must match HF's for whole prompts, varlen batches, paged decode
through shuffled block tables, chunked prefill, and a greedy generation loop.
"""

from __future__ import annotations

import random

import pytest
import torch
import transformers

from refengine.attention.metadata import build_attention_metadata
from refengine.model.hf_config import load_model_config
from refengine.model.layers.attention import allocate_kv_caches
from refengine.model.loader import load_model

BLOCK = 4
VOCAB = 192

# initializer_range 0.2 (not HF's 0.02) so attention is peaked and logits are O(1): with near-uniform
# attention a wrong position, mask or RoPE would hardly show in the logits.
BASE = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=256,
    initializer_range=0.2,
    rms_norm_eps=1e-5,
    bos_token_id=1,
    eos_token_id=2,
)

CASES = {
    "llama_gqa": ("LlamaForCausalLM", dict(num_key_value_heads=2)),
    "llama_mha_tied_bias": (
        "LlamaForCausalLM",
        dict(hidden_size=48, num_key_value_heads=4, tie_word_embeddings=True, attention_bias=True, mlp_bias=True),
    ),
    "qwen2_bias_tied": (
        "Qwen2ForCausalLM",
        dict(num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True, rope_theta=1e6),
    ),
    "mistral_head_dim": ("MistralForCausalLM", dict(num_key_value_heads=1, head_dim=32, sliding_window=None)),
    "llama3_rope": (
        "LlamaForCausalLM",
        dict(
            num_key_value_heads=2,
            rope_scaling=dict(
                rope_type="llama3",
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=16,
            ),
        ),
    ),
    "linear_rope": ("LlamaForCausalLM", dict(num_key_value_heads=2, rope_scaling=dict(rope_type="linear", factor=2.0))),
    "yarn_rope": (
        "LlamaForCausalLM",
        dict(
            num_key_value_heads=2, rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=32)
        ),
    ),
}


def _build(tmp_path, arch: str, overrides: dict, seed: int = 0, **save_kw):
    cfg_cls = {
        "LlamaForCausalLM": transformers.LlamaConfig,
        "Qwen2ForCausalLM": transformers.Qwen2Config,
        "MistralForCausalLM": transformers.MistralConfig,
    }[arch]
    cfg = cfg_cls(**{**BASE, **overrides})
    torch.manual_seed(seed)
    hf = getattr(transformers, arch)(cfg).eval()
    path = tmp_path / arch
    hf.save_pretrained(path, safe_serialization=True, **save_kw)
    mc = load_model_config(path)
    ours = load_model(path, mc, dtype=torch.float32, device="cpu")
    return hf, ours, mc


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    # These models are tiny: with 2 threads, each op's fork/join dominates and stalls badly when
    # another process holds a core. One thread is faster and steadier here.
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="module", params=list(CASES))
def models(request, tmp_path_factory):
    arch, overrides = CASES[request.param]
    return _build(tmp_path_factory.mktemp(request.param), arch, overrides)


def _hf_logits(hf, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].float()


def _close(ours: torch.Tensor, ref: torch.Tensor) -> None:
    scale = max(1.0, ref.abs().max().item())
    torch.testing.assert_close(ours, ref, atol=1e-4 * scale, rtol=1e-4)


class PagedRunner:
    """Drives our forward like the engine does: block tables per sequence, one flat step at a time."""

    def __init__(self, model, mc, num_blocks: int = 64, seed: int = 0):
        self.model = model
        self.kv = allocate_kv_caches(mc, num_blocks, BLOCK, torch.float32, "cpu")
        self.free = list(range(num_blocks))
        random.Random(seed).shuffle(self.free)  # blocks handed out in no particular order
        self.tables: dict[int, list[int]] = {}
        self.lens: dict[int, int] = {}

    def step(self, work: list[tuple[int, list[int]]]) -> list[torch.Tensor]:
        """work: [(seq_id, new token ids)] -> per sequence, logits of its new tokens."""
        seqs, ids, pos = [], [], []
        for sid, toks in work:
            start = self.lens.get(sid, 0)
            table = self.tables.setdefault(sid, [])
            while len(table) * BLOCK < start + len(toks):
                table.append(self.free.pop())
            seqs.append((start, len(toks), list(table)))
            ids += toks
            pos += range(start, start + len(toks))
            self.lens[sid] = start + len(toks)
        meta = build_attention_metadata(seqs, BLOCK, "cpu")
        hidden = self.model(torch.tensor(ids), torch.tensor(pos), self.kv, meta)
        logits = self.model.compute_logits(hidden)
        return list(logits.split([len(t) for _, t in work]))


def _prompt(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (n,), generator=g).tolist()


def test_full_prompt_logits(models):
    hf, ours, mc = models
    ids = _prompt(23, 1)
    (logits,) = PagedRunner(ours, mc).step([(0, ids)])
    _close(logits, _hf_logits(hf, ids))


def test_varlen_batch_matches_per_sequence(models):
    hf, ours, mc = models
    prompts = [_prompt(n, 10 + n) for n in (7, 1, 13, 2, 5)]  # a 1-token prompt takes the decode path
    outs = PagedRunner(ours, mc).step(list(enumerate(prompts)))
    for ids, logits in zip(prompts, outs):
        _close(logits, _hf_logits(hf, ids))


def test_paged_decode_and_mixed_steps(models):
    hf, ours, mc = models
    runner = PagedRunner(ours, mc, seed=3)
    seqs = {0: _prompt(10, 2), 1: _prompt(5, 3)}  # 10 % BLOCK != 0: partially filled last block
    for sid, logits in zip(seqs, runner.step(list(seqs.items()))):
        _close(logits, _hf_logits(hf, seqs[sid]))
    late = _prompt(9, 4)
    for step in range(6):
        work = [(sid, [int(torch.randint(3, VOCAB, (1,)))]) for sid in seqs]
        if step == 2:  # a new request's prefill joins two running decodes in one step
            work.insert(1, (2, late))
        elif step > 2:
            work.append((2, [int(torch.randint(3, VOCAB, (1,)))]))
        outs = runner.step(work)
        for (sid, toks), logits in zip(work, outs):
            if sid == 2 and step == 2:
                seqs[2] = list(late)
            else:
                seqs[sid] = seqs[sid] + toks
            ref = _hf_logits(hf, seqs[sid])[-len(toks) :]
            _close(logits, ref)


def test_chunked_prefill(models):
    hf, ours, mc = models
    ids = _prompt(15, 5)
    runner = PagedRunner(ours, mc, seed=7)
    first = runner.step([(0, ids[:6])])[0]  # chunk boundary 6 is inside a block of 4
    second = runner.step([(0, ids[6:])])[0]
    ref = _hf_logits(hf, ids)
    _close(first, ref[:6])
    _close(second, ref[6:])


def test_greedy_generation_matches_hf_generate(models):
    hf, ours, mc = models
    prompt = _prompt(6, 9)
    with torch.no_grad():
        ref = hf.generate(torch.tensor([prompt]), max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)[
            0, len(prompt) :
        ].tolist()
    runner = PagedRunner(ours, mc, seed=11)
    out, logits = [], runner.step([(0, prompt)])[0]
    for _ in range(8):
        logits[-1, mc.eos_token_id] = float("-inf")  # as min_new_tokens does
        out.append(int(logits[-1].argmax()))
        logits = runner.step([(0, out[-1:])])[0]
    assert out == ref


def test_sharded_checkpoint(tmp_path):
    hf, ours, mc = _build(tmp_path, "LlamaForCausalLM", dict(num_key_value_heads=2), max_shard_size="40KB")
    assert (tmp_path / "LlamaForCausalLM" / "model.safetensors.index.json").is_file()
    ids = _prompt(12, 6)
    _close(PagedRunner(ours, mc).step([(0, ids)])[0], _hf_logits(hf, ids))


def test_dynamic_ntk_rope_at_its_reference_length(tmp_path):
    # refengine fixes the dynamic-NTK base for length max_position * factor (vLLM's choice);
    # transformers recomputes it from the current length, so the two agree exactly at that length.
    scaling = dict(rope_type="dynamic", factor=2.0)
    hf, ours, mc = _build(
        tmp_path, "LlamaForCausalLM", dict(num_key_value_heads=2, max_position_embeddings=12, rope_scaling=scaling)
    )
    ids = _prompt(24, 8)
    _close(PagedRunner(ours, mc).step([(0, ids)])[0], _hf_logits(hf, ids))


def test_tensor_parallel_weight_shards(tmp_path):
    """Each TP rank's weight_loader keeps exactly its shard; 2 KV heads over 4 ranks are replicated."""
    hf, _, mc = _build(tmp_path, "LlamaForCausalLM", dict(num_key_value_heads=2))
    full = hf.state_dict()
    hd, tp = mc.head_dim, 4
    inter = mc.intermediate_size // tp
    for rank in range(tp):
        m = load_model(tmp_path / "LlamaForCausalLM", mc, tp_rank=rank, tp_size=tp)
        attn, mlp = m.model.layers[1].self_attn, m.model.layers[1].mlp
        p = "model.layers.1."
        q, k, v = attn.qkv_proj.weight.split([hd, hd, hd])  # 1 query head, 1 (replicated) KV head per rank
        kv_head = rank // 2
        assert torch.equal(q, full[p + "self_attn.q_proj.weight"][rank * hd : (rank + 1) * hd])
        assert torch.equal(k, full[p + "self_attn.k_proj.weight"][kv_head * hd : (kv_head + 1) * hd])
        assert torch.equal(v, full[p + "self_attn.v_proj.weight"][kv_head * hd : (kv_head + 1) * hd])
        assert torch.equal(attn.o_proj.weight, full[p + "self_attn.o_proj.weight"][:, rank * hd : (rank + 1) * hd])
        gate, up = mlp.gate_up_proj.weight.split([inter, inter])
        assert torch.equal(gate, full[p + "mlp.gate_proj.weight"][rank * inter : (rank + 1) * inter])
        assert torch.equal(up, full[p + "mlp.up_proj.weight"][rank * inter : (rank + 1) * inter])
        assert torch.equal(mlp.down_proj.weight, full[p + "mlp.down_proj.weight"][:, rank * inter : (rank + 1) * inter])
        rows = VOCAB // tp
        assert torch.equal(
            m.model.embed_tokens.weight, full["model.embed_tokens.weight"][rank * rows : (rank + 1) * rows]
        )
        assert torch.equal(m.lm_head.weight, full["lm_head.weight"][rank * rows : (rank + 1) * rows])
