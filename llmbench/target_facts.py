"""What the target says about its own configuration, recorded in run.json next to what was asked.

Engines publish their configuration as Prometheus info metrics: vLLM and refengine export
`vllm:cache_config_info` (block size, number of KV blocks, cache dtype, ...), and refengine also
exports `refengine:quantization_info` (the precision policy in force) and
`refengine:model_memory_bytes`. A run that says which policy and KV budget were really in force
can be compared honestly with another; one that only records the flags asked for cannot.
"""

from __future__ import annotations

import urllib.error
import urllib.request

INFO_METRICS = {"vllm:cache_config_info": "cache_config", "refengine:quantization_info": "quantization"}


def engine_facts(base_url: str, api_key: str | None = None, timeout_s: float = 5.0) -> dict:
    """Labels of the known info metrics and the memory gauges; {} when /metrics is unreachable or foreign."""
    from prometheus_client.parser import text_string_to_metric_families

    req = urllib.request.Request(base_url.rstrip("/") + "/metrics",
                                 headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            text = r.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError):
        return {}
    facts: dict = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = INFO_METRICS.get(sample.name) or INFO_METRICS.get(sample.name.removesuffix("_info") + "_info")
                if key and sample.value == 1:
                    facts[key] = {k: v for k, v in sample.labels.items() if k != "model_name"}
                elif sample.name == "refengine:model_memory_bytes":
                    facts.setdefault("memory_bytes", {})[sample.labels.get("what", "?")] = sample.value
    except ValueError:            # not Prometheus text: nothing to record
        return {}
    return facts
