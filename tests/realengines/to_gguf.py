"""Write a refengine Hugging Face Llama checkpoint as a GGUF file that llama.cpp loads.

Run with the llama-cpp venv's python (it has numpy and the `gguf` package; the project's own
venv does not): `python to_gguf.py MODEL_DIR OUT.gguf`. float32 tensors, the tokenizer as a
GPT-2-style byte-level BPE (what refengine's tokenizer.json is), so llama.cpp tokenizes and
decodes as the Hugging Face tokenizer does.

Why the q/k permutation: Hugging Face Llama applies rotary embeddings to the two halves of each
head (rotate_half); llama.cpp's LLAMA graph rotates adjacent pairs. Converting reorders the rows
of q_proj/k_proj within each head so both compute the same attention (the same reordering
llama.cpp's own converter does).
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import gguf
import numpy as np


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The format is 8 bytes of header length, a JSON header, then raw little-endian data."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    dtypes = {"F32": np.float32, "F16": np.float16}
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        lo, hi = meta["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + lo : 8 + n + hi], dtype=dtypes[meta["dtype"]]).reshape(meta["shape"])
    return out


def permute_for_rope(w: np.ndarray, n_heads: int) -> np.ndarray:
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tokenizer_fields(writer: gguf.GGUFWriter, model_dir: Path, cfg: dict) -> None:
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    vocab: dict[str, int] = tok["model"]["vocab"]
    for added in tok.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
    tokens = [""] * cfg["vocab_size"]
    for text, i in vocab.items():
        tokens[i] = text
    special = {a["id"] for a in tok.get("added_tokens", []) if a.get("special")}
    types = [gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for i in range(len(tokens))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")  # the GPT-2 split regex, as ByteLevel(use_regex=True)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(cfg["bos_token_id"])
    writer.add_eos_token_id(cfg["eos_token_id"])
    writer.add_add_bos_token(True)


def convert(model_dir: Path, out: Path) -> None:
    cfg = json.loads((model_dir / "config.json").read_text())
    w = read_safetensors(model_dir / "model.safetensors")
    n_layers, n_head, n_kv = cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name(model_dir.name)
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_block_count(n_layers)
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    writer.add_key_length(cfg["head_dim"])
    writer.add_value_length(cfg["head_dim"])
    writer.add_rope_dimension_count(cfg["head_dim"])
    writer.add_rope_freq_base(cfg["rope_theta"])
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_vocab_size(cfg["vocab_size"])
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    tokenizer_fields(writer, model_dir, cfg)

    def put(name: str, t: np.ndarray) -> None:
        writer.add_tensor(name, np.ascontiguousarray(t, dtype=np.float32))

    put("token_embd.weight", w["model.embed_tokens.weight"])
    for i in range(n_layers):
        pre, blk = f"model.layers.{i}.", f"blk.{i}."
        put(blk + "attn_norm.weight", w[pre + "input_layernorm.weight"])
        put(blk + "attn_q.weight", permute_for_rope(w[pre + "self_attn.q_proj.weight"], n_head))
        put(blk + "attn_k.weight", permute_for_rope(w[pre + "self_attn.k_proj.weight"], n_kv))
        put(blk + "attn_v.weight", w[pre + "self_attn.v_proj.weight"])
        put(blk + "attn_output.weight", w[pre + "self_attn.o_proj.weight"])
        put(blk + "ffn_norm.weight", w[pre + "post_attention_layernorm.weight"])
        put(blk + "ffn_gate.weight", w[pre + "mlp.gate_proj.weight"])
        put(blk + "ffn_up.weight", w[pre + "mlp.up_proj.weight"])
        put(blk + "ffn_down.weight", w[pre + "mlp.down_proj.weight"])
    put("output_norm.weight", w["model.norm.weight"])
    put("output.weight", w.get("lm_head.weight", w["model.embed_tokens.weight"]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    convert(Path(sys.argv[1]), Path(sys.argv[2]))
