"""refengine: the reference LLM inference engine bundled with llmbench.

Paged KV cache with prefix caching, continuous batching with chunked prefill and preemption,
Llama-family models from Hugging Face directories, plain PyTorch. It imports nothing else of
the llmbench project (docs/architecture.md).
"""

from refengine.config import EngineArgs
from refengine.errors import RefEngineError
from refengine.outputs import CompletionOutput, RequestOutput
from refengine.sampling_params import SamplingParams


def __getattr__(name):
    # LLM pulls in torch and the model code; keep `import refengine` cheap for the core's users.
    if name == "LLM":
        from refengine.llm import LLM

        return LLM
    if name == "LLMEngine":
        from refengine.engine import LLMEngine

        return LLMEngine
    raise AttributeError(name)


__all__ = ["LLM", "LLMEngine", "EngineArgs", "SamplingParams", "RequestOutput", "CompletionOutput", "RefEngineError"]
__version__ = "0.1.0"
