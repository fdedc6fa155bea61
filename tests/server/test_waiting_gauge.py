"""`vllm:num_requests_waiting` counts a request as waiting until a step schedules it, not until that
step ends: a long prefill in progress is running work, as vLLM counts it. (Counted until the step's
end, a KV ramp saw 'requests waiting' at concurrency 1 and reported a capacity of 1 for 2.)"""

import threading

import httpx
from prometheus_client.parser import text_string_to_metric_families


def _waiting(url: str) -> float:
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        if fam.name == "vllm:num_requests_waiting":
            return fam.samples[0].value
    raise AssertionError("no vllm:num_requests_waiting")


def test_a_request_whose_prefill_is_under_way_is_not_waiting(InProcessServer):
    with InProcessServer(max_num_seqs=4) as srv:
        scheduler = srv.engine.scheduler
        schedule, scheduled, release = scheduler.schedule, threading.Event(), threading.Event()

        def slow_schedule():                # the step after scheduling lasts until we release it
            out = schedule()
            if scheduler.num_running:
                scheduled.set()
                release.wait(10)
            return out

        scheduler.schedule = slow_schedule
        body = {"prompt": [5] * 20, "max_tokens": 2, "ignore_eos": True}
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            done: list[int] = []
            sender = threading.Thread(target=lambda: done.append(client.post("/v1/completions", json=body)
                                                                 .status_code))
            sender.start()
            assert scheduled.wait(10)
            during_prefill = _waiting(srv.url)
            release.set()
            scheduler.schedule = schedule
            sender.join(30)
        assert done == [200]
        assert during_prefill == 0
