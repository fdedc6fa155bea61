"""A tiny replica and a heavy-tailed length mix: fleets that simulate in a second (test_fleet*.py)."""

from analyzers.model.presets import resolve_model
from analyzers.plan.gpu_profiles import published_profile
from analyzers.plan.simulate import Simulator, random_prompt
from analyzers.plan.step_model import StepModel
from refengine.config import CacheConfig, SchedulerConfig


def tiny_replica() -> Simulator:
    # Four seats per replica: a seat held by a 200-token answer is one a short request cannot have.
    return Simulator(
        StepModel(resolve_model("tiny-test"), published_profile("h100")),
        SchedulerConfig(max_num_seqs=4, max_model_len=512),
        CacheConfig(num_blocks=2000),
    )


def heavy_tailed(i: int) -> tuple[list[int], int]:
    """One request in ten answers 200 tokens, the others 10 (a fixed hash of the index: the same mix everywhere)."""
    long = (i * 2654435761) % 1000 < 100
    return random_prompt(16, 0, i, vocab=4096), 200 if long else 10
