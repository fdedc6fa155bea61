"""What the ramp is asked to do (RampSpec: the target, the request's length, the concurrencies to step
through, each level's seconds), checked, and RampError: a ramp that cannot run as asked, in one line."""

from __future__ import annotations

from dataclasses import dataclass


class RampError(ValueError):
    """A ramp that cannot run as asked (bad spec, unreachable target): one line for the user."""


@dataclass(frozen=True)
class RampSpec:
    target: str
    prompt_tokens: int = 1000
    max_tokens: int = 8
    levels: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    level_seconds: float = 5.0
    scrape_interval_s: float = 0.1
    request_timeout_s: float = 300.0
    model: str | None = None
    api_key: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.target.startswith(("http://", "https://")):
            raise RampError(f"--target must be a URL like http://127.0.0.1:8000, got {self.target!r}")
        if self.prompt_tokens < 1 or self.max_tokens < 1:
            raise RampError("prompt and max tokens must be >= 1")
        if not self.levels or list(self.levels) != sorted(set(self.levels)) or self.levels[0] < 1:
            raise RampError("ramp levels must be increasing positive concurrencies")
        if self.level_seconds <= 0:
            raise RampError("level seconds must be > 0")

    @property
    def request_tokens(self) -> int:
        return self.prompt_tokens + self.max_tokens
