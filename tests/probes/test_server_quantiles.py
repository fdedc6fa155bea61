"""server probe: a quantile is a bucket, and a number only where the bucket has two finite edges.

vLLM's request-phase histograms start at 0.3 s: against vLLM on CPU, queue time read P50 150 ms /
P99 297 ms (interpolated from 0 inside the first bucket) while its own sum/count was 0.01 ms."""

import pytest

from probes.base import ProbeContext
from probes.prom import Histogram as H
from probes.prom import quantile, quantile_estimate
from probes.server import ServerProbe

# vLLM 0.32's buckets of request_queue_time, prefill, decode and e2e (vllm/v1/metrics/loggers.py)
REQUEST_BUCKETS = [
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
]
LABELS = 'engine="0",model_name="Qwen/Qwen2.5-0.5B-Instruct"'


def _family(name: str, observations: list[float]) -> str:
    lines = [f"# HELP {name} Histogram of {name}.", f"# TYPE {name} histogram"]
    for le in REQUEST_BUCKETS:
        lines.append(f'{name}_bucket{{{LABELS},le="{le}"}} {float(sum(o <= le for o in observations))}')
    lines.append(f'{name}_bucket{{{LABELS},le="+Inf"}} {float(len(observations))}')
    lines.append(f"{name}_count{{{LABELS}}} {float(len(observations))}")
    lines.append(f"{name}_sum{{{LABELS}}} {sum(observations)}")
    return "\n".join(lines)


def _vllm_page(queue: list[float], prefill: list[float], decode: list[float], e2e: list[float]) -> str:
    return (
        "\n".join(
            [
                "# HELP vllm:num_requests_running Number of requests in model execution batches.",
                "# TYPE vllm:num_requests_running gauge",
                f"vllm:num_requests_running{{{LABELS}}} 2.0",
                _family("vllm:request_queue_time_seconds", queue),
                _family("vllm:request_prefill_time_seconds", prefill),
                _family("vllm:request_decode_time_seconds", decode),
                _family("vllm:e2e_request_latency_seconds", e2e),
            ]
        )
        + "\n"
    )


def _two_scrapes(tmp_path, queue, prefill, decode, e2e) -> dict:
    probe = ServerProbe(ProbeContext(out_dir=tmp_path, target_url="http://127.0.0.1:9"))
    probe.row_from_text(_vllm_page([], [], [], []), t=100.0)
    return probe.row_from_text(_vllm_page(queue, prefill, decode, e2e), t=101.0)


def test_a_quantile_in_vllms_first_bucket_is_a_bound_not_a_number(tmp_path):
    n = 50
    row = _two_scrapes(tmp_path, queue=[1e-5] * n, prefill=[0.04] * n, decode=[0.12] * n, e2e=[0.16] * n)
    for h, mean in (("queue_time", 1e-5), ("prefill_time", 0.04), ("decode_time", 0.12), ("e2e", 0.16)):
        assert row[f"{h}_count"] == n and row[f"{h}_mean_s"] == pytest.approx(mean)  # the informative figure
        for p in ("p50", "p90", "p99"):
            assert row[f"{h}_{p}_s"] is None, (h, p, row[f"{h}_{p}_s"])  # was 0.15 / 0.27 / 0.297
            assert row[f"{h}_{p}_lt_s"] == 0.3


def test_a_quantile_in_a_later_bucket_is_interpolated_within_its_edges(tmp_path):
    queue = [0.001] * 40 + [0.6] * 60  # P50 and P99 in (0.5, 0.8]
    row = _two_scrapes(tmp_path, queue=queue, prefill=[0.1] * 100, decode=[3.0] * 100, e2e=[9000.0] * 100)
    assert 0.5 < row["queue_time_p50_s"] <= 0.8 and row["queue_time_p50_bucket_s"] == [0.5, 0.8]
    assert 0.5 < row["queue_time_p99_s"] <= 0.8 and "queue_time_p99_lt_s" not in row
    assert row["decode_time_p50_s"] == pytest.approx(2.5 + 2.5 * 0.5) and row["decode_time_p50_bucket_s"] == [2.5, 5.0]
    # above the last finite edge: only "> 7680 s" is known
    assert row["e2e_p99_s"] is None and row["e2e_p99_gt_s"] == 7680.0 and row["e2e_mean_s"] == pytest.approx(9000.0)


def test_quantile_estimate_edges():
    h = H(buckets={0.1: 10, 0.5: 60, 1.0: 100, float("inf"): 100}, count=100, sum=40)
    est = quantile_estimate(h, 0.5)
    assert (est.lo, est.hi) == (0.1, 0.5) and est.value == pytest.approx(0.1 + 0.4 * 40 / 50)
    first = quantile_estimate(h, 0.05)
    assert first.value is None and first.below == 0.1 and first.above is None and quantile(h, 0.05) is None
    # empty leading buckets: the lower edge of the first bucket with observations is known
    assert quantile(H(buckets={0.3: 0, 0.5: 10, float("inf"): 10}), 0.5) == pytest.approx(0.4)
    top = quantile_estimate(H(buckets={1.0: 0, float("inf"): 5}), 0.5)
    assert top.value is None and top.above == 1.0 and top.below is None
    assert quantile_estimate(H(buckets={1.0: 0, float("inf"): 0}), 0.5) is None
