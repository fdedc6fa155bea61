"""The built-in models: small Llama checkpoints generated locally, deterministically, never downloaded.

`resolve_model("tiny")` writes (once) a real Hugging Face model directory to
`$LLMBENCH_CACHE/models/<preset>-<version>` (default `~/.cache/llmbench/models/...`):
config.json (LlamaForCausalLM), model.safetensors, tokenizer.json, tokenizer_config.json (with a
small chat template) and generation_config.json. Everything is loaded by the same code path as
any other checkpoint, and transformers can load the directory too.

Presets (vocab 4096, max_position_embeddings 4096, float32 weights):

    preset     hidden layers heads kv_heads head_dim intermediate  tied   parameters
    tiny-test    64     2      4      2        16        176        yes       354,624
    tiny       1024     8     16      4        64       2816        no     98,583,552

`tiny` is sized so a CPU step is dominated by model compute, not Python; `tiny-test` is for
fast tests. Weights are random: N(0, 0.02), with o_proj/down_proj scaled by 1/sqrt(2 * layers)
so the residual stream grows slowly over depth (GPT-2's init), norms at 1. The text they
produce is gibberish; the point is realistic shapes and costs.

The tokenizer is a byte-level BPE trained with the `tokenizers` library on a corpus generated
here from a seeded generator (pseudo-English words) plus fixed English sentences. Training
reaches exactly 4096 entries (checked), so the model's vocab equals the tokenizer's and every id
the model can sample decodes. Special tokens: <unk> 0, <s> 1 (BOS), </s> 2 (EOS), <pad> 3, and
<|system|> <|user|> <|assistant|> for the chat template.

Generation is deterministic (fixed seeds; BPE training on a fixed corpus is deterministic, which
a test checks): the same version on the same torch produces the same bytes. Generating `tiny`
takes a few seconds (mostly writing its 394 MB of float32 weights); it happens once per cache. It writes into a temporary sibling directory and renames it into
place, so concurrent processes never see (or corrupt) a half-written model.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

from refengine.errors import RefEngineError

VERSION = "v1"
VOCAB_SIZE = 4096
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
BOS_ID, EOS_ID = 1, 2
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{{ message['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class Preset:
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int = 4096
    seed: int = 0


PRESETS = {
    "tiny-test": Preset(64, 2, 4, 2, 16, 176, tie_word_embeddings=True, seed=1),
    "tiny": Preset(1024, 8, 16, 4, 64, 2816, tie_word_embeddings=False, seed=2),
}

_ENGLISH = """The quick brown fox jumps over the lazy dog.
A paged KV cache stores keys and values in fixed-size blocks.
Continuous batching lets new requests join while others are still decoding.
The scheduler decides which requests run in the next step.
Hello, how are you today? I am fine, thank you.
What is the capital of France? The capital of France is Paris.
Tell me a story about a small robot who learns to read.
Once upon a time there was a little town by the sea.
The weather today is sunny with a light breeze from the west.
Please summarize the following text in one sentence.
Large language models generate text one token at a time.
Time to first token and time per output token are the two latency numbers that matter.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 42 100 1000 2048 4096.
"""

_ONSETS = [
    "",
    "b",
    "c",
    "d",
    "f",
    "g",
    "h",
    "j",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "w",
    "y",
    "z",
    "br",
    "ch",
    "cl",
    "cr",
    "dr",
    "fl",
    "fr",
    "gl",
    "gr",
    "pl",
    "pr",
    "sc",
    "sh",
    "sk",
    "sl",
    "sm",
    "sn",
    "sp",
    "st",
    "str",
    "sw",
    "th",
    "tr",
    "tw",
    "wh",
]
_NUCLEI = ["a", "e", "i", "o", "u", "ai", "ea", "ee", "ie", "oa", "oo", "ou", "y"]
_CODAS = [
    "",
    "",
    "b",
    "ck",
    "d",
    "ft",
    "g",
    "l",
    "ld",
    "lk",
    "ll",
    "m",
    "mp",
    "n",
    "nd",
    "ng",
    "nk",
    "nt",
    "p",
    "r",
    "rd",
    "rk",
    "rm",
    "rn",
    "rt",
    "s",
    "sh",
    "sk",
    "ss",
    "st",
    "t",
    "th",
    "x",
]


def _corpus(seed: int = 1234, lines: int = 10000) -> list[str]:
    """Pseudo-English: a seeded lexicon of syllable words drawn with a Zipf-like skew, plus real sentences."""
    rng = random.Random(seed)

    def word() -> str:
        return "".join(
            rng.choice(_ONSETS) + rng.choice(_NUCLEI) + rng.choice(_CODAS) for _ in range(rng.choice([1, 1, 2, 2, 3]))
        )

    lexicon = [word() for _ in range(6000)]
    out = []
    for _ in range(lines):
        words = [
            lexicon[min(int(rng.paretovariate(1.1)) - 1, len(lexicon) - 1)]
            if rng.random() < 0.7
            else rng.choice(lexicon)
            for _ in range(rng.randint(4, 14))
        ]
        words[0] = words[0].capitalize()
        out.append(" ".join(words) + rng.choice([".", ".", ".", "?", "!", ","]))
    return out + _ENGLISH.splitlines() * 50


def build_tokenizer_json() -> str:
    """Train the byte-level BPE; returns tokenizer.json's text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_corpus(), trainer)
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(f"BPE training reached {tok.get_vocab_size()} tokens, expected {VOCAB_SIZE}")
    # So transformers' AutoTokenizer prepends <s> like ours does with add_bos=True.
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", BOS_ID)]
    )
    return tok.to_str()


def model_config_dict(p: Preset) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": p.hidden_size,
        "num_hidden_layers": p.num_layers,
        "num_attention_heads": p.num_heads,
        "num_key_value_heads": p.num_kv_heads,
        "head_dim": p.head_dim,
        "intermediate_size": p.intermediate_size,
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": p.max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "tie_word_embeddings": p.tie_word_embeddings,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "torch_dtype": "float32",
        "initializer_range": 0.02,
    }


def build_weights(p: Preset) -> dict[str, torch.Tensor]:
    """Seeded random weights in HF names, created in a fixed order so the bytes are reproducible."""
    g = torch.Generator().manual_seed(p.seed)
    std, out_std = 0.02, 0.02 / math.sqrt(2 * p.num_layers)
    h, q, kv, inter = p.hidden_size, p.num_heads * p.head_dim, p.num_kv_heads * p.head_dim, p.intermediate_size

    def normal(*shape, s=std):
        return torch.empty(*shape).normal_(0.0, s, generator=g)

    w = {"model.embed_tokens.weight": normal(VOCAB_SIZE, h)}
    for i in range(p.num_layers):
        pre = f"model.layers.{i}."
        w[pre + "self_attn.q_proj.weight"] = normal(q, h)
        w[pre + "self_attn.k_proj.weight"] = normal(kv, h)
        w[pre + "self_attn.v_proj.weight"] = normal(kv, h)
        w[pre + "self_attn.o_proj.weight"] = normal(h, q, s=out_std)
        w[pre + "mlp.gate_proj.weight"] = normal(inter, h)
        w[pre + "mlp.up_proj.weight"] = normal(inter, h)
        w[pre + "mlp.down_proj.weight"] = normal(h, inter, s=out_std)
        w[pre + "input_layernorm.weight"] = torch.ones(h)
        w[pre + "post_attention_layernorm.weight"] = torch.ones(h)
    w["model.norm.weight"] = torch.ones(h)
    if not p.tie_word_embeddings:
        w["lm_head.weight"] = normal(VOCAB_SIZE, h)
    return w


def write_checkpoint(p: Preset, out: Path) -> None:
    """A Hugging Face model directory for any Preset (tests write shapes the presets do not have)."""
    save_file(build_weights(p), str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(model_config_dict(p), indent=2))
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": BOS_ID, "eos_token_id": EOS_ID}, indent=2))
    (out / "tokenizer.json").write_text(build_tokenizer_json())
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "pad_token": "<pad>",
                "add_bos_token": True,
                "model_max_length": p.max_position_embeddings,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=2,
        )
    )


def cache_root() -> Path:
    base = os.environ.get("LLMBENCH_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "llmbench") / "models"


def ensure_preset(name: str, root: str | Path | None = None) -> Path:
    """Path of the preset's model directory, generating it first if it is not there yet."""
    if name not in PRESETS:
        raise RefEngineError(f"unknown built-in model {name!r}; presets: {', '.join(PRESETS)}")
    root = Path(root) if root is not None else cache_root()
    final = root / f"{name}-{VERSION}"
    if (final / "config.json").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-{VERSION}.tmp-", dir=root))
    try:
        write_checkpoint(PRESETS[name], tmp)
        try:
            os.rename(tmp, final)  # atomic; fails if another process got there first
        except OSError:
            if not (final / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def resolve_model(model: str) -> Path:
    """A preset name -> its generated directory; a directory with config.json -> itself."""
    if model in PRESETS:
        return ensure_preset(model)
    path = Path(model).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path
    raise RefEngineError(
        f"model {model!r} is neither a built-in preset ({', '.join(PRESETS)}) nor a directory "
        "with config.json; refengine never downloads models"
    )
