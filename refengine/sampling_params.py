"""Per-request sampling parameters, in vLLM's names and defaults."""

from __future__ import annotations

from dataclasses import dataclass

from refengine.errors import RefEngineError


@dataclass
class SamplingParams:
    """How to pick tokens and when to stop.

    temperature == 0 means greedy. `top_k` of 0 or -1 disables top-k (vLLM accepts both).
    `stop` strings are matched on the detokenized text and are not included in the output.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    max_tokens: int | None = 16
    min_tokens: int = 0
    stop: list[str] | str | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        if self.top_k == -1:
            self.top_k = 0
        self._validate()

    def _validate(self) -> None:
        if self.n != 1:
            raise RefEngineError(f"n={self.n} is not supported; refengine generates one sequence per request (n=1)")
        if self.temperature < 0:
            raise RefEngineError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise RefEngineError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise RefEngineError(f"top_k must be >= 0 (or -1 to disable), got {self.top_k}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise RefEngineError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.min_tokens < 0:
            raise RefEngineError(f"min_tokens must be >= 0, got {self.min_tokens}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise RefEngineError(f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})")
        if any(not s for s in self.stop):
            raise RefEngineError("stop strings must not be empty")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
