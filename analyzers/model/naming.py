"""A model's name from its own config.json, not from the folder it sits in.

Folders are named by whoever downloaded them (`snapshots/5cc0ffe09...`, `model`, `ckpt-1`);
the config says what the model is: `_name_or_path` (written by transformers when saving, e.g.
"meta-llama/Meta-Llama-3-70B-Instruct"), `architectures` (e.g. "LlamaForCausalLM") and
`model_type`, and the parameter count computed from its shapes gives the size.
"""

from __future__ import annotations


def config_model_name(cfg: dict, num_parameters: int | None = None) -> str:
    """'Meta-Llama-3-70B-Instruct (LlamaForCausalLM, llama, 70.55B)' or 'LlamaForCausalLM (llama, 8.03B)'."""
    size = f"{num_parameters / 1e9:.2f}B" if num_parameters else None
    arch = (cfg.get("architectures") or [None])[0]
    mtype = cfg.get("model_type")
    name = str(cfg.get("_name_or_path") or "").rstrip("/")
    # A local path or a hub snapshot says little: keep its last meaningful component only.
    base = name.rsplit("/", 2)
    label = "/".join(base[-2:]) if len(base) >= 2 and not name.startswith(("/", ".")) else base[-1]
    details = [x for x in (arch, mtype, size) if x]
    if label and label not in (arch, mtype):
        return f"{label} ({', '.join(details)})" if details else label
    if arch:
        return f"{arch} ({', '.join(x for x in (mtype, size) if x)})" if (mtype or size) else arch
    return f"{mtype} model ({size})" if mtype and size else (mtype or "unnamed model")
