"""Per-request sampling parameters, in vLLM's names and defaults.

Every value is checked against what the sampler can honour, so no request can make it produce
NaN or overflow a generator: numbers finite, integers within 64 bits, temperatures that are 0
(greedy) or at least MIN_TEMPERATURE. A rejected value raises `SamplingParamError`, which names
the field (the server puts it in the OpenAI error's `param`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from refengine.errors import RefEngineError

# Below 0.01 the sampler's logits / temperature overflows float32 into inf and softmax gives NaN;
# vLLM raises such temperatures to 0.01 (its _MAX_TEMP) and so do we. Above MAX_TEMPERATURE the
# distribution is uniform to float32 precision anyway; a larger value is a mistake, not a request.
MIN_TEMPERATURE = 0.01
MAX_TEMPERATURE = 100.0
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
SEED_MIN, SEED_MAX = INT64_MIN, 2**64 - 1  # what torch.Generator.manual_seed accepts
MAX_STOP_STRINGS = 64
MAX_STOP_TOKEN_IDS = 1024


class SamplingParamError(RefEngineError):
    """One sampling parameter is out of range; `param` names it."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


def _finite(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SamplingParamError(name, f"{name} must be a number, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise SamplingParamError(name, f"{name} must be a finite number, got {value}")
    return value


def _integer(name: str, value, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SamplingParamError(name, f"{name} must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        shown = value if abs(value) < 10**30 else f"an integer of {len(str(abs(value)))} digits"
        raise SamplingParamError(name, f"{name} must be in [{lo}, {hi}], got {shown}")
    return value


@dataclass
class SamplingParams:
    """How to pick tokens and when to stop.

    temperature == 0 means greedy; 0 < temperature < 0.01 is raised to 0.01 (as vLLM does).
    `top_k` of 0 or -1 disables top-k (vLLM accepts both). `stop` strings are matched on the
    detokenized text and are not included in the output.
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
        self.temperature = float(self.temperature)
        self.top_p = float(self.top_p)
        if 0 < self.temperature < MIN_TEMPERATURE:
            self.temperature = MIN_TEMPERATURE

    @property
    def stop_strings(self) -> list[str]:
        """`stop` as __post_init__ normalized it: always a list (a str or None given becomes one)."""
        assert isinstance(self.stop, list), "SamplingParams.__post_init__ normalizes stop to a list"
        return self.stop

    @property
    def stop_ids(self) -> list[int]:
        """`stop_token_ids` as __post_init__ normalized it: always a list."""
        assert isinstance(self.stop_token_ids, list), "SamplingParams.__post_init__ normalizes stop_token_ids"
        return self.stop_token_ids

    def _validate(self) -> None:
        # In this order: the first bad field is the one the 400 names.
        self._validate_sampling()
        self._validate_lengths()
        self._validate_stops()

    def _validate_sampling(self) -> None:
        _integer("n", self.n)
        if self.n != 1:
            raise SamplingParamError(
                "n", f"n={self.n} is not supported; refengine generates one sequence per request (n=1)"
            )
        t = _finite("temperature", self.temperature)
        if not 0 <= t <= MAX_TEMPERATURE:
            raise SamplingParamError(
                "temperature", f"temperature must be in [0, {MAX_TEMPERATURE:g}] (0 is greedy), got {t}"
            )
        p = _finite("top_p", self.top_p)
        if not 0 < p <= 1:
            raise SamplingParamError("top_p", f"top_p must be in (0, 1], got {p}")
        if _integer("top_k", self.top_k) < 0:
            raise SamplingParamError("top_k", f"top_k must be >= 0 (or -1 to disable), got {self.top_k}")
        if self.seed is not None:
            _integer("seed", self.seed, SEED_MIN, SEED_MAX)

    def _validate_lengths(self) -> None:
        if self.max_tokens is not None and _integer("max_tokens", self.max_tokens) < 1:
            raise SamplingParamError("max_tokens", f"max_tokens must be at least 1, got {self.max_tokens}")
        if _integer("min_tokens", self.min_tokens) < 0:
            raise SamplingParamError("min_tokens", f"min_tokens must be >= 0, got {self.min_tokens}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise SamplingParamError(
                "min_tokens", f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})"
            )

    def _validate_stops(self) -> None:
        if len(self.stop_strings) > MAX_STOP_STRINGS:
            raise SamplingParamError("stop", f"at most {MAX_STOP_STRINGS} stop strings, got {len(self.stop_strings)}")
        if any(not isinstance(s, str) or not s for s in self.stop_strings):
            raise SamplingParamError("stop", "stop strings must be non-empty strings")
        if len(self.stop_ids) > MAX_STOP_TOKEN_IDS:
            raise SamplingParamError(
                "stop_token_ids", f"at most {MAX_STOP_TOKEN_IDS} stop_token_ids, got {len(self.stop_ids)}"
            )
        for t in self.stop_ids:
            _integer("stop_token_ids", t)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
