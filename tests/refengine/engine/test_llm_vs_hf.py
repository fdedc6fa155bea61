"""End to end: LLM.generate on a Hugging Face checkpoint gives transformers' greedy tokens,
for one request alone and for a batch of different lengths."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

from refengine import LLM, SamplingParams  # noqa: E402


@pytest.fixture(scope="module")
def hf_llama(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    model = transformers.LlamaForCausalLM(cfg).eval()
    path = tmp_path_factory.mktemp("llama")
    model.save_pretrained(path, safe_serialization=True)
    return model, str(path)


def _hf_greedy(model, prompt, n):
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0
        )
    return out[0, len(prompt) :].tolist()


def test_single_and_batched_greedy_match_transformers(hf_llama):
    model, path = hf_llama
    prompts = [[1, 5, 9, 200, 31, 7], list(range(3, 40)), [42], list(range(100, 118))]
    expected = [_hf_greedy(model, p, 10) for p in prompts]
    llm = LLM(model=path, max_model_len=128, block_size=8)
    params = SamplingParams(max_tokens=10, temperature=0, ignore_eos=True)
    assert llm.generate(prompts[0], params)[0].outputs[0].token_ids == expected[0]
    got = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    assert got == expected
