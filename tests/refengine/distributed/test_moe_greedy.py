"""With default arguments a Mixtral's greedy tokens equal transformers' for every prompt of a batch.

The prompts go in together, so under a capacity limit one prompt's tokens would crowd another's
out of an expert; dropless routing (the default) makes each output independent of the batch."""

import torch

from refengine import LLM, SamplingParams

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [17, 3, 99, 42], [200, 201, 202, 13, 14, 15, 16, 1, 2], [77, 78]]
NEW_TOKENS = 8


def test_default_mixtral_greedy_equals_transformers(mixtral_dir):
    from transformers import MixtralForCausalLM

    llm = LLM(model=mixtral_dir, max_model_len=128, num_gpu_blocks_override=64, block_size=4)
    outs = llm.generate(PROMPTS, SamplingParams(max_tokens=NEW_TOKENS, temperature=0, ignore_eos=True))
    hf = MixtralForCausalLM.from_pretrained(mixtral_dir).eval()
    for prompt, out in zip(PROMPTS, outs):
        with torch.no_grad():
            ref = hf.generate(
                torch.tensor([prompt]),
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
                pad_token_id=0,
            )[0, len(prompt) :].tolist()
        assert out.outputs[0].token_ids == ref
    assert llm.llm_engine.stats().moe_overflow_total == 0
