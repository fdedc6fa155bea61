"""The engine's limits a standing level is held against: max_num_seqs and max_num_batched_tokens,
from the run's `--engine-arg` flags (refengine's defaults when embedded), and the KV cache the
target published (its block count, rundir.kv_cache)."""

from __future__ import annotations

from typing import Any

from rundir.kv_cache import KVCacheSize


def engine_limits(
    engine_args: list[str], embedded: bool, replicas: int = 1, engine_facts: dict | None = None
) -> dict[str, Any]:
    """max_num_seqs and max_num_batched_tokens from `--engine-arg` flags (refengine's defaults when
    embedded; unknown for an external target, whose limits are inferred from the batch instead).
    For a fleet the server probe sums running over the replicas, so the cap it is held against is
    the fleet's, max_num_seqs x replicas (`replicas` says how many); the token budget is per step
    of one engine and stays as it is. `kv_cache` is one replica's cache as the target published
    it (None when it did not)."""
    out: dict[str, Any] = {
        "max_num_seqs": 128 if embedded else None,
        "max_num_batched_tokens": 2048 if embedded else None,
    }
    args = [a for arg in engine_args for a in arg.split("=", 1)]
    for i, a in enumerate(args[:-1]):
        key = a.lstrip("-").replace("-", "_")
        if key in out:
            try:
                out[key] = int(args[i + 1])
            except ValueError:
                pass
    seqs = out["max_num_seqs"]
    if seqs is not None:
        out["max_num_seqs"] = seqs * replicas
    out["replicas"] = replicas
    out["kv_cache"] = KVCacheSize.from_engine_facts(engine_facts or {})
    return out


def cap_words(limits: dict) -> str:
    cap, replicas = limits["max_num_seqs"], limits.get("replicas") or 1
    return (
        f"max_num_seqs={cap}"
        if replicas == 1
        else f"max_num_seqs={cap // replicas} on each of {replicas} replicas ({cap} in all)"
    )
