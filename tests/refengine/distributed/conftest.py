"""Tiny random Llama and Mixtral checkpoints in Hugging Face format, written once per session."""

import pytest
import torch


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=250,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.08,
        tie_word_embeddings=False,
    )
    path = tmp_path_factory.mktemp("llama")
    LlamaForCausalLM(cfg).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def mqa_llama_dir(tmp_path_factory):
    """One KV head: under TP 2 it is replicated on both ranks instead of split."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    cfg = LlamaConfig(
        vocab_size=250,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=1,
        max_position_embeddings=256,
        initializer_range=0.08,
        tie_word_embeddings=True,
    )
    path = tmp_path_factory.mktemp("mqa")
    LlamaForCausalLM(cfg).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def mixtral_dir(tmp_path_factory):
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    cfg = MixtralConfig(
        vocab_size=250,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=256,
        initializer_range=0.08,
    )
    path = tmp_path_factory.mktemp("mixtral")
    MixtralForCausalLM(cfg).save_pretrained(path)
    return str(path)
