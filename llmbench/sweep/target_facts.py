"""What the target says about itself, read from its /metrics with the probes' one parser
(probes.prom): its configuration for run.json, and the gauges the KV ramp watches.

Engines publish their configuration as Prometheus info metrics: vLLM and refengine export
`vllm:cache_config_info` (block size, number of KV blocks, cache dtype, ...), and refengine also
exports `refengine:quantization_info` (the precision policy in force) and
`refengine:model_memory_bytes`. A run that says which policy and KV budget were really in force
can be compared honestly with another; one that only records the flags asked for cannot.
"""

from __future__ import annotations

import urllib.error
import urllib.request

from loadgen.kv_ramp.gauges import ServerGauges
from probes.prom import parse_metrics

FACT_KEYS = {"vllm:cache_config_info": "cache_config", "refengine:quantization_info": "quantization"}


def engine_facts(base_url: str, api_key: str | None = None, timeout_s: float = 5.0) -> dict:
    """Labels of the known info metrics and the memory gauges; {} when /metrics is unreachable or foreign."""
    req = urllib.request.Request(
        base_url.rstrip("/") + "/metrics", headers={"Authorization": f"Bearer {api_key}"} if api_key else {}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            text = r.read().decode("utf-8", "replace")
        snap = parse_metrics(text)
    except (urllib.error.URLError, OSError, ValueError):  # unreachable, or not Prometheus text
        return {}
    # A data-parallel server's replicas (vLLM's engine label) have the one configuration: one replica's.
    facts: dict = {
        key: {k: v for k, v in snap.info[name].items() if k not in ("model_name", "engine")}
        for name, key in FACT_KEYS.items()
        if name in snap.info
    }
    if "cache_config" in facts:  # whose block count it is: vLLM reserves one (rundir.kv_cache)
        facts["engine"] = snap.engine
    for labels, value in snap.by_name.get("refengine:model_memory_bytes", []):
        facts.setdefault("memory_bytes", {})[labels.get("what", "?")] = value
    return facts


def server_gauges(text: str) -> ServerGauges:
    """The KV ramp's view of one /metrics page (raises ValueError when it is not Prometheus text)."""
    snap = parse_metrics(text)
    v = snap.values
    return ServerGauges(
        running=v.get("running", 0.0),
        waiting=v.get("waiting", 0.0),
        kv_usage=v.get("kv_usage"),
        preemptions=v.get("preemptions_total", 0.0),
        cache_config=snap.info.get("vllm:cache_config_info", {}),
        engine=snap.engine,
    )
