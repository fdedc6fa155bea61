"""`refengine.server --data-parallel-size 2`: two real tiny-test replicas behind the front, on loopback."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families
from refengine_proc import start_refengine

from probes.prom import parse_metrics
from refengine.server.dp_policy import REPLICA_HEADER

# Two replicas and a front take ~12 s to start: .ci/run runs this file with --runslow (the default
# suite keeps under 10 minutes on 2 cores).
pytestmark = pytest.mark.slow
LONG = 1500  # tokens of a request that is still generating seconds after its first chunk
KEY = "sekret"  # the fleets require it: the front passes the client's Authorization on to the replica
AUTH = {"Authorization": f"Bearer {KEY}"}


@contextlib.contextmanager
def fleet(*args: str):
    proc, url = start_refengine(
        "--data-parallel-size", "2", "--max-model-len", "2048", "--api-key", KEY, *args, quiet=True
    )
    try:
        yield proc, url
    finally:
        proc.terminate()  # the front stops its replicas
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def lo_fleet_front():
    """The fast tests share one fleet (two replicas take ~10 s to start on two cores): its front's
    process and URL."""
    with fleet("--lb-policy", "least-outstanding") as (proc, url):
        yield proc, url


@pytest.fixture(scope="module")
def lo_fleet(lo_fleet_front):
    return lo_fleet_front[1]


def complete(url: str, max_tokens: int = 4) -> httpx.Response:
    r = httpx.post(
        url + "/v1/completions", json={"prompt": "hello", "max_tokens": max_tokens}, headers=AUTH, timeout=60
    )
    assert r.status_code == 200, r.text
    return r


def series(url: str, name: str) -> dict[str, float]:
    """engine label -> value of the samples named `name` on the front's /metrics."""
    text = httpx.get(url + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[s.labels["engine"]] = out.get(s.labels["engine"], 0.0) + s.value
    return out


@contextlib.contextmanager
def long_stream(url: str):
    """A streaming request that has sent its first chunk and goes on generating: (replica, first line);
    the rest of its lines are in `long_stream.rest` (an iterator) while the block runs."""
    body = {"prompt": "hello", "max_tokens": LONG, "ignore_eos": True, "stream": True}
    with (
        httpx.Client(timeout=60) as client,
        client.stream("POST", url + "/v1/completions", json=body, headers=AUTH) as resp,
    ):
        assert resp.status_code == 200
        lines = resp.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        long_stream.rest = lines
        yield resp.headers[REPLICA_HEADER], first


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def test_requests_spread_over_both_replicas_which_the_header_names(lo_fleet):
    # One at a time, both replicas are idle at every pick: ties go round-robin.
    served = [complete(lo_fleet).headers[REPLICA_HEADER] for _ in range(4)]
    assert set(served) == {"0", "1"}
    assert served[0] != served[1] and served[:2] == served[2:]  # strictly alternating


def test_first_chunk_arrives_while_the_replica_still_generates(lo_fleet):
    with long_stream(lo_fleet) as (replica, first):
        assert json.loads(first[len("data: ") :])["choices"][0]["text"] is not None
        # Not buffered by the front: when the first chunk is here the replica is still at work.
        assert series(lo_fleet, "vllm:num_requests_running")[replica] == 1
        assert series(lo_fleet, "refengine:dp_requests_in_flight")[replica] == 1
        assert series(lo_fleet, "vllm:generation_tokens_total")[replica] < LONG
    # The client went away: the front closes its upstream stream and the replica aborts it.
    wait_for(lambda: series(lo_fleet, "vllm:num_requests_running")[replica] == 0)
    assert series(lo_fleet, "refengine:dp_requests_in_flight")[replica] == 0


def test_metrics_carry_both_replicas_with_the_engine_label(lo_fleet):
    complete(lo_fleet)
    complete(lo_fleet)
    tokens = series(lo_fleet, "vllm:generation_tokens_total")
    assert set(tokens) == {"0", "1"} and all(v > 0 for v in tokens.values())
    assert set(series(lo_fleet, "vllm:time_to_first_token_seconds_count")) == {"0", "1"}
    routed = series(lo_fleet, "refengine:dp_requests_routed_total")
    assert set(routed) == {"0", "1"} and all(v > 0 for v in routed.values())
    assert series(lo_fleet, "refengine:dp_replica_up") == {"0": 1.0, "1": 1.0}
    # The probes read the fleet's page as one engine, summed over replicas.
    snap = parse_metrics(httpx.get(lo_fleet + "/metrics").text)
    assert snap.engine == "refengine"
    assert snap.values["generation_tokens_total"] == sum(tokens.values())
    assert set(snap.per_engine) == {"0", "1"}  # and each replica's queue and KV cache apart
    assert all(set(v) == {"running", "waiting", "kv_usage"} for v in snap.per_engine.values())


def test_each_replica_runs_on_cores_of_its_own_with_threads_to_match(lo_fleet_front):
    front = psutil.Process(lo_fleet_front[0].pid)
    front_cores = sorted(front.cpu_affinity())
    replicas = sorted(front.children(), key=lambda p: p.pid)
    assert len(replicas) == 2
    if len(front_cores) < 2:
        # Fewer cores than replicas: they share the front's, each with one thread.
        assert all(sorted(r.cpu_affinity()) == front_cores for r in replicas)
        return
    mine = [set(r.cpu_affinity()) for r in replicas]
    assert not mine[0] & mine[1] and all(mine)  # disjoint, none empty
    assert mine[0] | mine[1] <= set(front_cores)
    assert [r.environ().get("OMP_NUM_THREADS") for r in replicas] == [str(len(m)) for m in mine]


def test_models_and_health_answer_for_the_fleet(lo_fleet):
    assert httpx.get(lo_fleet + "/health").status_code == 200
    assert httpx.get(lo_fleet + "/v1/models", headers=AUTH).json()["data"][0]["id"] == "tiny-test"
    assert httpx.get(lo_fleet + "/v1/models").status_code == 401  # the replica's own check
    refused = httpx.post(lo_fleet + "/v1/completions", json={"prompt": "hello"})
    assert refused.status_code == 401 and REPLICA_HEADER in refused.headers


def test_least_outstanding_sends_new_requests_to_the_idle_replica(lo_fleet):
    with long_stream(lo_fleet) as (busy, _first):
        served = [complete(lo_fleet).headers[REPLICA_HEADER] for _ in range(3)]
    assert served == [str(1 - int(busy))] * 3


@pytest.mark.slow
def test_round_robin_alternates_even_while_one_replica_is_busy():
    with fleet("--lb-policy", "round-robin") as (_, url), long_stream(url) as (busy, _first):
        served = [complete(url).headers[REPLICA_HEADER] for _ in range(4)]
    idle = str(1 - int(busy))
    assert served == [idle, busy, idle, busy]


@pytest.mark.slow
def test_a_dead_replica_fails_health_and_the_other_keeps_serving():
    with fleet() as (proc, url):
        # The front starts replica 0, then 1: their pids are in that order.
        replicas = sorted(psutil.Process(proc.pid).children(), key=lambda p: p.pid)
        assert len(replicas) == 2
        with long_stream(url) as (busy, _first):
            victim = replicas[int(busy)]
            victim.kill()
            victim.wait(10)
            rest = [line for line in long_stream.rest if line.startswith("data: ")]
        # The stream it was serving ends with an error event that says so, not silently.
        assert any(f"replica {busy} ended the stream early" in line for line in rest), rest[-3:]
        health = httpx.get(url + "/health")
        assert health.status_code == 503
        assert [r["healthy"] for r in health.json()["replicas"]] == [busy != "0", busy != "1"]
        served = {complete(url).headers[REPLICA_HEADER] for _ in range(4)}
        assert served == {str(1 - int(busy))}  # every request went to the survivor
        assert series(url, "refengine:dp_replica_up") == {busy: 0.0, str(1 - int(busy)): 1.0}
        replicas[1 - int(busy)].kill()
        replicas[1 - int(busy)].wait(10)
        gone = httpx.post(url + "/v1/completions", json={"prompt": "hello", "max_tokens": 2}, headers=AUTH)
        assert gone.status_code == 503 and "no replica" in gone.json()["error"]["message"]


def test_a_fleet_of_a_missing_model_is_one_line_and_exit_2():
    r = subprocess.run(
        [sys.executable, "-m", "refengine.server", "--model", "no-such-model", "--data-parallel-size", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no-such-model" in r.stderr and "Traceback" not in r.stderr
