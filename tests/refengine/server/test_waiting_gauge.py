"""`vllm:num_requests_waiting` counts a request as waiting until a step schedules it, not until that
step ends: a long prefill in progress is running work, as vLLM counts it. (Counted until the step's
end, a KV ramp saw 'requests waiting' at concurrency 1 and reported a capacity of 1 for 2.)"""

import threading
import time

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

        def slow_schedule():  # the step after scheduling lasts until we release it
            out = schedule()
            if scheduler.num_running:
                scheduled.set()
                release.wait(10)
            return out

        scheduler.schedule = slow_schedule
        body = {"prompt": [5] * 20, "max_tokens": 2, "ignore_eos": True}
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            done: list[int] = []
            sender = threading.Thread(target=lambda: done.append(client.post("/v1/completions", json=body).status_code))
            sender.start()
            assert scheduled.wait(10)
            during_prefill = _waiting(srv.url)
            release.set()
            scheduler.schedule = schedule
            sender.join(30)
        assert done == [200]
        assert during_prefill == 0


def test_a_waiting_request_whose_client_left_is_not_counted_while_the_step_runs(InProcessServer):
    """Its abort is taken in when the running step ends (seconds on a CPU prefill); until then the
    gauge counted it, beside the next level's requests (70 waiting with 64 users)."""
    with InProcessServer(max_num_seqs=1) as srv:
        scheduler = srv.engine.scheduler
        schedule, scheduled, release = scheduler.schedule, threading.Event(), threading.Event()

        def slow_schedule():
            out = schedule()
            if scheduler.num_running and not release.is_set():
                scheduled.set()
                release.wait(10)
            return out

        scheduler.schedule = slow_schedule
        running = {"prompt": [5] * 20, "max_tokens": 2, "ignore_eos": True}
        waiting = {"prompt": [6] * 20, "max_tokens": 2, "ignore_eos": True, "stream": True}
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            sender = threading.Thread(target=lambda: client.post("/v1/completions", json=running))
            sender.start()
            assert scheduled.wait(10)
            with httpx.Client(base_url=srv.url, timeout=30) as other:
                with other.stream("POST", "/v1/completions", json=waiting) as r:
                    assert r.status_code == 200
                    deadline = time.monotonic() + 5
                    while _waiting(srv.url) != 1 and time.monotonic() < deadline:
                        time.sleep(0.02)
                    assert _waiting(srv.url) == 1
            deadline = time.monotonic() + 5  # the client has gone; the step still runs
            while _waiting(srv.url) != 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            after_leaving = _waiting(srv.url)
            release.set()
            sender.join(30)
        assert after_leaving == 0
