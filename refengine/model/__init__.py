"""Models: HF config parsing, the Llama-family model, the safetensors loader, built-in tiny presets.

Entry points: `resolve_model(name_or_dir)`, `load_model_config(dir)`, `load_model(dir, config,
dtype, device)`; the per-step attention contract is in `refengine/attention/metadata.py`.
"""

from refengine.model.hf_config import ModelConfig, load_model_config
from refengine.model.tiny import resolve_model

__all__ = ["ModelConfig", "load_model_config", "resolve_model"]
