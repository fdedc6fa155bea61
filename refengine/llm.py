"""The offline API in vLLM's shape: `LLM(model=..., **engine_args).generate(prompts, params)`."""

from __future__ import annotations

from typing import Callable, Sequence

from refengine.config import EngineArgs
from refengine.engine import LLMEngine
from refengine.errors import RefEngineError
from refengine.outputs import RequestOutput
from refengine.sampling_params import SamplingParams

PromptLike = str | list[int] | dict


def _normalize_prompts(prompts) -> list[str | list[int]]:
    """Accept a string, a token-id list, a {"prompt": ...}/{"prompt_token_ids": ...} dict, or a list of those."""
    if isinstance(prompts, (str, dict)):
        prompts = [prompts]
    elif isinstance(prompts, list) and prompts and isinstance(prompts[0], int):
        prompts = [prompts]
    out = []
    for p in prompts:
        if isinstance(p, dict):
            if "prompt_token_ids" in p:
                p = list(p["prompt_token_ids"])
            elif "prompt" in p:
                p = p["prompt"]
            else:
                raise RefEngineError("a prompt dict needs 'prompt' or 'prompt_token_ids'")
        if not isinstance(p, (str, list)):
            raise RefEngineError(f"a prompt must be a string or a list of token ids, got {type(p).__name__}")
        out.append(p)
    return out


class LLM:
    def __init__(self, model: str = "tiny", **engine_args):
        self.llm_engine = LLMEngine(EngineArgs.from_kwargs(model, **engine_args))

    def get_tokenizer(self):
        return self.llm_engine.tokenizer

    def generate(
        self,
        prompts,
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        priority: Sequence[int] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> list[RequestOutput]:
        """Run every prompt to completion; outputs come back in the order of the prompts.

        `progress(done, total)` is called as requests finish (the CLI hangs a progress bar on it).
        """
        prompts = _normalize_prompts(prompts)
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params = [sampling_params or SamplingParams()] * len(prompts)
        else:
            params = list(sampling_params)
            if len(params) != len(prompts):
                raise RefEngineError(f"got {len(params)} sampling params for {len(prompts)} prompts")
        prio = list(priority) if priority is not None else [0] * len(prompts)
        engine = self.llm_engine
        # Validate everything before queueing anything, so a bad prompt leaves no half-run batch.
        for p in prompts:
            engine.encode_prompt(p)
        ids = []
        try:
            for p, sp, pr in zip(prompts, params, prio):
                ids.append(engine.add_request(p, sp, priority=pr))
        except RefEngineError:
            engine.abort_request(ids)
            raise
        finished: dict[str, RequestOutput] = {}
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.finished:
                    finished[out.request_id] = out
                    if progress:
                        progress(len(finished), len(ids))
        return [finished[i] for i in ids]
