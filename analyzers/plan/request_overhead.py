"""RequestOverhead: what a request spends between the client sending it and the scheduler seeing it.

HTTP, JSON, tokenizing the prompt (refengine and vLLM both tokenize before they stamp a request's
arrival), on an event loop that is also streaming to the requests already running. The simulator adds
it to every request's TTFT as `fixed_s + per_running_s x (requests running) + per_prompt_token_s x
(the request's prompt tokens)`; docs/planning.md, "Fitting to a run", says where each term is measured.
The prompt term is why a fit to 128-token levels left 512-token TTFTs short by the same ~1.5 ms at every
layout: tokenizing and parsing a prompt takes time in proportion to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzers.diagnosis_error import DiagnosisError


@dataclass(frozen=True)
class RequestOverhead:
    fixed_s: float = 0.0  # once per request
    per_running_s: float = 0.0  # per request the server is running when it arrives
    per_prompt_token_s: float = 0.0  # per token of its own prompt

    def __post_init__(self) -> None:
        if min(self.fixed_s, self.per_running_s, self.per_prompt_token_s) < 0:
            raise DiagnosisError(f"a request overhead's terms must be >= 0, got {self}")

    def mean_s(self, running: float, prompt_tokens: float) -> float:
        return self.fixed_s + self.per_running_s * running + self.per_prompt_token_s * prompt_tokens

    def describe(self) -> str:
        return (
            f"request overhead {self.fixed_s * 1e3:.1f} ms + {self.per_running_s * 1e3:.2f} ms per running "
            f"request + {self.per_prompt_token_s * 1e6:.2f} us per prompt token"
        )
