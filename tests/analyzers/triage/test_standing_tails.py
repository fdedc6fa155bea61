"""Standing tails: a level slow throughout (no spike stands out) is split into queue, prefill and
decode from the server's histograms, and its cause named with the numbers; findings rank by the
share of the tail they explain and host-wide or whole-host evidence is context, not a cause."""

from __future__ import annotations

import numpy as np
from planted import T0, write_run

from analyzers.triage.p99 import diagnose_p99
from rundir import RequestRecord

OUT = 32


def level(
    level_id: str,
    concurrency: int,
    t0: float,
    seconds: float,
    ttft_s: float,
    tpot_s: float,
    prompt: int = 128,
    seed: int = 0,
) -> list[RequestRecord]:
    """A closed-loop level whose every request takes about ttft_s to its first token (no spikes)."""
    rng = np.random.default_rng(seed)
    recs, clocks = [], [t0 + 0.01 * u for u in range(concurrency)]
    while min(clocks) < t0 + seconds:
        u = int(np.argmin(clocks))
        t_sent = clocks[u]
        ttft = ttft_s * (1 + 0.1 * rng.random())
        e2e = ttft + tpot_s * (OUT - 1)
        recs.append(
            RequestRecord(
                level_id=level_id,
                concurrency=concurrency,
                request_rate=None,
                target_input_len=prompt,
                target_output_len=OUT,
                t_scheduled=t_sent,
                t_sent=t_sent,
                t_first_token=t_sent + ttft,
                t_done=t_sent + e2e,
                status="ok",
                in_window=True,
                prompt_tokens=prompt,
                completion_tokens=OUT,
                itl_s=[tpot_s] * (OUT - 1),
            ).derive()
        )
        clocks[u] = t_sent + e2e + 0.001
    return recs


def server_rows(
    t0: float,
    t1: float,
    running: float,
    waiting: float,
    queue_s: float,
    prefill_s: float,
    kv: float = 0.3,
    preemptions: float = 0.0,
    count: float = 4.0,
) -> list[dict]:
    return [
        {
            "t": float(t),
            "up": 1,
            "running": running,
            "waiting": waiting,
            "kv_usage": kv,
            "preemptions": preemptions,
            "queue_time_count": count,
            "queue_time_mean_s": queue_s,
            "prefill_time_count": count,
            "prefill_time_mean_s": prefill_s,
            "ttft_count": count,
            "ttft_mean_s": queue_s + prefill_s,
        }
        for t in np.arange(t0 + 1, t1 + 1, 1.0)
    ]


def host_rows(t0: float, t1: float, server: float, others: float = 0.05, cores: int = 2) -> list[dict]:
    busy = min(100.0, 100.0 * (server + others) / cores)
    return [
        {
            "t": float(t),
            "dt_s": 1.0,
            "cpu_pct": busy,
            "cpu_per_core_pct": [busy] * cores,
            "server_cpu_cores": server,
            "client_cpu_cores": 0.05,
            "others_cpu_cores": others,
            "top_others": [{"pid": 4242, "comm": "burner", "cpu_cores": others}] if others > 0.3 else [],
        }
        for t in np.arange(t0 + 1, t1 + 1, 1.0)
    ]


def two_levels(
    tmp_path,
    loaded_server: dict,
    loaded_host: dict | None = None,
    ttft_s: float = 2.5,
    url: str = "http://127.0.0.1:8000",
    tpot_s: float = 0.02,
    target: dict | None = None,
):
    base = level("c1", 1, T0, 10, 0.05, 0.01)
    t1 = max(r.t_done for r in base) + 1
    loaded = level("c16", 16, t1, 10, ttft_s, tpot_s, seed=1)
    t2 = max(r.t_done for r in loaded)
    probes = {
        "server": server_rows(T0, t1 - 1, 1, 0, 0.002, 0.04) + server_rows(t1, t2 + 2, **loaded_server),
        "host": host_rows(T0, t1 - 1, 0.3) + host_rows(t1, t2 + 2, **(loaded_host or {"server": 0.6})),
    }
    return write_run(tmp_path / "r", base + loaded, probes, url=url, target=target)


def test_admission_limit_is_named_with_its_numbers(tmp_path):
    run = two_levels(tmp_path, dict(running=2, waiting=14, queue_s=2.3, prefill_s=0.1))
    diag = diagnose_p99(run)
    assert diag.tails.spikes == [] or len(diag.tails.spikes) <= 3  # the tail stands, it does not spike
    f = diag.findings[0]
    assert f.check_id == "p99.sched.admission" and f.kind == "standing" and f.coverage == 1.0, diag.headline
    # an external target: max_num_seqs is not known, the batch's own ceiling is what is pinned
    assert "running pinned at 2 (its ceiling)" in f.title and "14.0 waiting" in f.title and "queue is 8" in f.title
    assert f.evidence["dominant_part"] == "queue" and f.evidence["levels"] == ["c16"]


FLEET = {"kind": "embedded", "engine_args": ["--max-num-seqs=2"], "replicas": 2, "lb_policy": "round-robin"}


def test_a_fleets_running_is_held_against_every_replicas_cap(tmp_path):
    """Two replicas of max_num_seqs 2: the probe sums running over them, so 3 running is not a batch
    pinned at its cap (one replica had room), and 4 is, said per replica."""
    f = diagnose_p99(
        two_levels(tmp_path, dict(running=3, waiting=14, queue_s=2.3, prefill_s=0.1), target=FLEET)
    ).findings[0]
    assert "pinned" not in f.title, f.title
    f = diagnose_p99(
        two_levels(tmp_path / "full", dict(running=4, waiting=14, queue_s=2.3, prefill_s=0.1), target=FLEET)
    ).findings[0]
    assert f.check_id == "p99.sched.admission", f.title
    assert "running pinned at max_num_seqs=2 on each of 2 replicas (4 in all)" in f.title, f.title


def test_kv_capacity_with_preemptions(tmp_path):
    run = two_levels(tmp_path, dict(running=6, waiting=10, queue_s=1.5, prefill_s=0.3, kv=0.99, preemptions=3))
    f = diagnose_p99(run).findings[0]
    assert f.check_id == "p99.sched.kv-capacity" and "KV cache 99% full" in f.title and "preemptions" in f.title


def test_a_kv_cache_full_for_the_next_request_is_kv_capacity_far_from_100_percent(tmp_path):
    """16 blocks, requests of 10: one runs (a second one's prompt squeezes in now and then), the
    others wait with the cache 80% used; the free 20% holds no one more. Not saturation."""
    run = two_levels(tmp_path, dict(running=1.7, waiting=13, queue_s=2.3, prefill_s=0.01, kv=0.8))
    f = diagnose_p99(run).findings[0]
    assert f.check_id == "p99.sched.kv-capacity", f.title
    assert (
        "full for the next request: 80% used" in f.title and "free 20% less than one running request's 47%" in f.title
    ), f.title


def test_a_cache_with_room_for_the_next_request_is_not_kv_capacity(tmp_path):
    run = two_levels(tmp_path, dict(running=2, waiting=14, queue_s=2.3, prefill_s=0.1, kv=0.4))
    f = diagnose_p99(run).findings[0]
    assert f.check_id == "p99.sched.admission", f.title


def test_a_compute_bound_engine_is_saturation_not_a_neighbour(tmp_path):
    run = two_levels(tmp_path, dict(running=16, waiting=3, queue_s=0.8, prefill_s=1.5), dict(server=1.9, others=0.05))
    diag = diagnose_p99(run)
    assert diag.findings[0].check_id == "p99.sched.saturation", diag.headline
    assert "busy on 1.9 of 2 cores" in diag.findings[0].title
    assert not any(f.check_id == "p99.host.cpu" for f in diag.findings)


def test_a_cpu_neighbour_is_named_in_a_standing_level(tmp_path):
    run = two_levels(tmp_path, dict(running=16, waiting=3, queue_s=0.8, prefill_s=1.5), dict(server=0.9, others=1.1))
    f = diagnose_p99(run).findings[0]
    assert f.check_id == "p99.host.cpu" and "other processes took 1.1 cores" in f.title


def test_time_outside_the_server_on_a_remote_target_is_the_network_path(tmp_path):
    run = two_levels(tmp_path, dict(running=16, waiting=0, queue_s=0.01, prefill_s=0.05), url="http://10.99.0.5:8000")
    f = diagnose_p99(run).findings[0]
    assert f.check_id == "p99.net.path" and f.category == "network" and "outside the server" in f.title


def test_a_tpot_tail_from_larger_decode_batches(tmp_path):
    run = two_levels(tmp_path, dict(running=16, waiting=0, queue_s=0.002, prefill_s=0.05), ttft_s=0.06, tpot_s=0.09)
    diag = diagnose_p99(run, metric="tpot")
    f = diag.findings[0]
    assert f.check_id == "p99.sched.batch-size" and "decode batches of 16.0 vs 1.0" in f.title, diag.headline
    assert "TPOT P95 9" in f.title and "misses the SLO of 50 ms" in f.title


def test_no_standing_tail_when_the_loaded_level_stays_near_its_baseline(tmp_path):
    run = two_levels(tmp_path, dict(running=4, waiting=0, queue_s=0.002, prefill_s=0.05), ttft_s=0.08)
    diag = diagnose_p99(run)
    assert diag.findings == [] and not any(lv.standing for lv in diag.levels)


def test_a_finding_that_explains_little_of_the_tail_is_context(tmp_path):
    from analyzers.triage.contracts import Finding, split_causes
    from analyzers.triage.tail_windows import Window

    a = Finding("p99.sched.admission", "scheduling", "high", "a", {"x": 1}, [Window(0, 1)], 1, "", tail_share=0.9)
    b = Finding("p99.net.retransmits", "network", "high", "b", {"x": 1}, [Window(0, 1)], 1, "", tail_share=0.1)
    c = Finding("p99.host.cpu", "host", "medium", "c", {"x": 1}, [Window(0, 1)], 1, "", tail_share=0.92)
    causes, context = split_causes([a, b, c])
    assert [f.check_id for f in causes] == ["p99.sched.admission", "p99.host.cpu"] and context == [b]


def published_cache(blocks: int, engine: str = "vllm", **target) -> dict:
    """run.json's target with the KV cache the server published (vllm:cache_config_info)."""
    return {
        "engine_facts": {"cache_config": {"num_gpu_blocks": str(blocks), "block_size": "128"}, "engine": engine},
        **target,
    }


def test_a_cache_that_holds_one_request_is_kv_capacity_when_every_scrape_fell_between_requests(tmp_path):
    """4 blocks of 128, one of them vLLM's null block; requests of 128 + 32 tokens take 2: one runs at
    a time. Each lives a few steps, so once-a-second scrapes all read the cache empty and nothing
    running (as on a fast host); the requests kept waiting and the published count says why."""
    run = two_levels(
        tmp_path, dict(running=0, waiting=14, queue_s=2.3, prefill_s=0.01, kv=0.0), target=published_cache(4)
    )
    f = diagnose_p99(run).findings[0]
    assert f.check_id == "p99.sched.kv-capacity", f.title
    assert "full for the next request: its 3 usable blocks of 128 tokens hold 1 request of 160 tokens" in f.title
    assert "(2 blocks each)" in f.title and "14.0 waiting" in f.title, f.title
    assert f.evidence["limits"]["kv_cache"] == {"num_blocks": 4, "block_size": 128, "engine": "vllm"}


def test_a_published_cache_with_room_for_the_load_is_not_kv_capacity(tmp_path):
    run = two_levels(
        tmp_path, dict(running=0, waiting=14, queue_s=2.3, prefill_s=0.01, kv=0.0), target=published_cache(40)
    )
    assert diagnose_p99(run).findings[0].check_id != "p99.sched.kv-capacity"


def test_more_running_than_the_count_allows_is_not_kv_capacity(tmp_path):
    """Three ran at once where the count says one fits: the requests shared blocks (prefixes), so the
    count is not what the engine needed; the batch's own ceiling is what held them."""
    run = two_levels(
        tmp_path, dict(running=3, waiting=14, queue_s=2.3, prefill_s=0.01, kv=0.2), target=published_cache(4)
    )
    f = diagnose_p99(run).findings[0]
    assert f.check_id == "p99.sched.admission", f.title


def test_an_admission_cap_at_what_fits_is_the_admission_limit(tmp_path):
    """max_num_seqs=1 and a cache that holds one: the cap binds first (it admits no more even with room)."""
    target = published_cache(4, engine="refengine", kind="embedded", engine_args=["--max-num-seqs=1"])
    run = two_levels(tmp_path, dict(running=1, waiting=14, queue_s=2.3, prefill_s=0.01, kv=0.5), target=target)
    f = diagnose_p99(run).findings[0]
    assert f.check_id == "p99.sched.admission" and "max_num_seqs=1" in f.title, f.title


def _cap_run(tmp_path, cap: int, running_reads: list[float]):
    """c16 behind --max-num-seqs=cap on a compute-bound server, its scrapes reading the batch as
    running_reads (cycled): what the last step left, not what the engine held through the next one."""
    base = level("c1", 1, T0, 10, 0.05, 0.01)
    t1 = max(r.t_done for r in base) + 1
    loaded = level("c16", 16, t1, 10, 2.5, 0.02, seed=1)
    t2 = max(r.t_done for r in loaded)
    rows = server_rows(t1, t2 + 2, running=0, waiting=5, queue_s=2.3, prefill_s=0.01)
    for i, row in enumerate(rows):
        row["running"] = running_reads[i % len(running_reads)]
    probes = {
        "server": server_rows(T0, t1 - 1, 1, 0, 0.002, 0.04) + rows,
        "host": host_rows(T0, t1 - 1, 0.3) + host_rows(t1, t2 + 2, server=1.7),
    }
    target = {"kind": "embedded", "engine_args": [f"--max-num-seqs={cap}"]}
    return write_run(tmp_path / "r", base + loaded, probes, target=target)


def test_a_cap_of_one_read_between_steps_is_the_admission_limit(tmp_path):
    """One slot, short requests: a scrape after the step that finished one reads 0 running until the
    next one's prefill ends — most scrapes (as on a fast host, and as vLLM sets its gauges). The slot
    was still what the others waited for, not a saturated engine."""
    f = diagnose_p99(_cap_run(tmp_path, 1, [1, 0, 0, 0, 0])).findings[0]
    assert f.check_id == "p99.sched.admission" and "max_num_seqs=1" in f.title, f.title


def test_a_cap_of_two_admitted_and_finished_together_is_the_admission_limit(tmp_path):
    """Two requests admitted in one step finish in one step: a scrape between that step and the next
    prefill reads an empty batch, and more than half of them did: a real c20 level behind
    --max-num-seqs=2 read these 15, 18 waiting at each (mean 0.93, under the one-short allowance).
    Every batch a step left non-empty was at the cap."""
    reads = [2, 2, 0, 0, 0, 0, 0, 2, 2, 0, 2, 2, 0, 2, 0]
    f = diagnose_p99(_cap_run(tmp_path, 2, reads)).findings[0]
    assert f.check_id == "p99.sched.admission" and "max_num_seqs=2" in f.title, f.title
    assert "2.0 in the batches a step left non-empty" in f.title, f.title


def test_a_cap_of_three_mostly_unfilled_is_not_the_admission_limit(tmp_path):
    """Its neighbour: a cap of 3 reached once but held at under one on average while requests waited
    is not what held them (one short of 3 would read 2)."""
    f = diagnose_p99(_cap_run(tmp_path, 3, [3, 0, 0, 1, 0])).findings[0]
    assert f.check_id != "p99.sched.admission", f.title


def test_levels_sharing_a_cause_say_which_miss_the_slo_and_which_only_stand_above_the_unloaded_one():
    """The finding's sentence is the worst level's ("misses the SLO"); the README's own sweep put a level
    within the SLO (c8: 499 ms against 1,500) in its "(also ...)" list as if it missed it too."""
    from analyzers.triage.levels import LevelLoad, Window
    from analyzers.triage.standing.check import _also

    def level(level_id, p99):
        return LevelLoad(level_id, 8, 100, Window(T0, T0 + 20), 0.46, p99, 1.5, "c1", 0.06, True, "", np.empty(0))

    words = _also([level("c32", 1.92), level("c8", 0.50)])
    assert words.startswith(" (also c32, over the SLO too; c8, within the SLO"), words
    assert _also([level("c8", 0.50)]).startswith(" (also c8, within the SLO"), _also([level("c8", 0.50)])
    assert _also([]) == ""
