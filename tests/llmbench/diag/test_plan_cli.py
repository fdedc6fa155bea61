"""`llmdiag plan --predict-sweep` and `llmdiag calibrate` as a user runs them (CliRunner, the real app)."""

import dataclasses
import json

import pytest
from synth_run import make_run, rec
from typer.testing import CliRunner

from analyzers.plan.gpu_profiles import published_profile
from analyzers.plan.predict import METRICS
from analyzers.plan.profile import MachineProfile
from llmbench.diag_cli import app
from rundir import RunDir

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.fixture
def run_dir(tmp_path):
    """Two closed-loop levels of tiny-test (10 prompt tokens, 11 output tokens), measured."""
    records = []
    for c, start, ttft in ((1, 0.0, 0.01), (4, 20.0, 0.03)):
        for i in range(30):
            records.append(
                rec(
                    start + i * 0.3,
                    ttft,
                    ttft + 10 * 0.004 * c,
                    11,
                    level=f"c{c}-in10-out11",
                    concurrency=c,
                    itl=[0.004 * c] * 10,
                )
            )
    run = make_run(tmp_path / "run", records, {"c1-in10-out11": (0, 10), "c4-in10-out11": (20, 30)}, model="tiny-test")
    info = run.read_info()
    info.target.engine_args = ["--max-num-seqs", "8", "--max-model-len", "256"]
    run.write_info(info)
    return run.path


def test_predict_sweep_prints_each_level_predicted_and_measured(run_dir):
    r = invoke("plan", "--predict-sweep", run_dir, "--profile", "h100", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert [lv["level_id"] for lv in out["levels"]] == ["c1-in10-out11", "c4-in10-out11"]
    for lv in out["levels"]:
        assert set(METRICS) <= set(lv["predicted"]) and set(METRICS) <= set(lv["measured"])
        assert all(lv["predicted"][k] > 0 for k in METRICS)
        assert lv["role"] == "predicted"
    c1 = out["levels"][0]["measured"]
    assert c1["ttft_p50_s"] == pytest.approx(0.01) and c1["tpot_p50_s"] == pytest.approx(0.004)
    assert out["engine"]["max_num_seqs"] == 8 and out["fit"] is None


@pytest.mark.slow
def test_fit_calibrates_to_the_named_levels_and_saves_the_profile(run_dir, tmp_path):
    r = invoke(
        "plan",
        "--predict-sweep",
        run_dir,
        "--profile",
        "h100",
        "--fit",
        "c1-in10-out11",
        "--json",
        "--save-profile",
        tmp_path / "fitted.json",
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert [lv["role"] for lv in out["levels"]] == ["fitted", "predicted"]
    assert out["fit"]["levels"] == ["c1-in10-out11"] and set(out["median_abs_error"]) == {"fitted", "predicted"}
    fitted = out["levels"][0]
    # An H100 is far faster than this synthetic run says: the fit brings the fitted level's TPOT to it.
    assert abs(fitted["error"]["tpot_p50_s"]) < 0.2
    profile = MachineProfile.load(tmp_path / "fitted.json")
    assert profile.source == "fitted" and "fitted to run" in profile.assumptions[-1]
    # Its concurrency-1 level lends the simulation its steps' wander, saved with the profile; --steady-steps not.
    assert profile.step_jitter is not None and profile.step_jitter.level_id == "c1-in10-out11"
    assert out["profile"]["step_jitter"]["n_gaps"] == profile.step_jitter.n_gaps
    steady = invoke(
        "plan", "--predict-sweep", run_dir, "--profile", "h100", "--fit", "c1-in10-out11", "--steady-steps", "--json"
    )
    assert steady.exit_code == 0 and json.loads(steady.output)["profile"]["step_jitter"] is None
    # The table says what the fit found, and where the request overhead came from (no server probe here).
    text = invoke("plan", "--predict-sweep", run_dir, "--profile", "h100", "--fit", "c1-in10-out11").output
    assert "fitted to c1-in10-out11: operators x" in " ".join(text.split())
    assert "(fitted to TTFT P50)" in " ".join(text.split())
    assert "step jitter: 300 inter-token gaps of 30 requests of c1-in10-out11" in " ".join(text.split())


def test_what_if_changes_the_engine_and_a_bad_one_is_one_line(run_dir):
    r = invoke(
        "plan",
        "--predict-sweep",
        run_dir,
        "--profile",
        "h100",
        "--json",
        "--what-if",
        "max_num_seqs=1,enable_chunked_prefill=false",
    )
    assert r.exit_code == 0, r.output
    engine = json.loads(r.output)["engine"]
    assert engine["max_num_seqs"] == 1 and engine["enable_chunked_prefill"] is False
    for bad in ("max_num_seqs", "max_num_seqz=4", "max_num_seqs=many", "enable_chunked_prefill=maybe"):
        r = invoke("plan", "--predict-sweep", run_dir, "--profile", "h100", "--what-if", bad)
        assert r.exit_code == 2, r.output
        assert r.output.strip().startswith("error:") and len(r.output.strip().splitlines()) == 1, r.output
        assert "Traceback" not in r.output


def test_predict_sweep_needs_a_profile_and_a_run(run_dir, tmp_path):
    for args in (
        ("--predict-sweep", run_dir),
        ("--predict-sweep", tmp_path / "nothing", "--profile", "h100"),
        ("--predict-sweep", run_dir, "--profile", tmp_path / "missing.json"),
        ("--predict-sweep", run_dir, "--profile", "h100", "--fit", "c99"),
    ):
        r = invoke("plan", *args)
        assert r.exit_code == 2 and "error:" in r.output and "Traceback" not in r.output, r.output


def test_predict_sweep_prints_a_table_by_default(run_dir):
    r = invoke("plan", "--predict-sweep", run_dir, "--profile", "a100")
    assert r.exit_code == 0, r.output
    assert "c4-in10-out11" in r.output and "median |error|" in r.output
    assert RunDir(run_dir).exists()


def _rank_rows(out: str) -> list[list[str]]:
    start = out.index("predicted at")
    return [
        [c.strip() for c in line.split("│") if c.strip()] for line in out[start:].splitlines() if line.startswith("│")
    ]


def test_plan_with_a_profile_ranks_on_predicted_goodput_and_compares_what_ifs():
    # A 70B model's steps are long, so a minute of simulated serving is few steps (a fast test).
    r = invoke(
        "plan",
        "--model",
        "llama-3-70b",
        "-c",
        "8",
        "--profile",
        "h100",
        "--no-quantize",
        "--input-len",
        "256",
        "--output-len",
        "16",
        "--top",
        "1",
        "--what-if",
        "max_num_seqs=1",
    )
    assert r.exit_code == 0, r.output
    rows = _rank_rows(r.output)
    assert len(rows) == 2  # the best plan, its baseline and one variation
    goodput = [float(row[3]) for row in rows]
    assert goodput == sorted(goodput, reverse=True)
    one_seat = [row for row in rows if row[2] == "max_num_seqs=1"]
    base = {row[1]: float(row[3]) for row in rows if row[2] == "-"}
    # One running request at a time cannot beat continuous batching at 8 users (or their share per replica).
    assert all(float(row[3]) <= base[row[1]] for row in one_seat)
    bad = invoke("plan", "--model", "llama-3-8b", "--profile", "h100", "--what-if", "max_num_seqs=0")
    assert bad.exit_code == 2 and "max_num_seqs" in bad.output and "Traceback" not in bad.output


def test_a_ranked_plan_simulates_the_requests_its_p99_needs():
    """8 users of 10-s requests: a fixed minute held ~50 requests and the P99 was flagged as rough; the
    window is sized the way the sweep sizes a level (analyzers/plan/rank.py)."""
    args = ("--model", "llama-3-70b", "-c", "8", "--profile", "h100", "--no-quantize", "--top", "1")
    r = invoke("plan", *args, "--input-len", "1024", "--output-len", "256")
    assert r.exit_code == 0, r.output
    assert len(_rank_rows(r.output)) == 1 and "fewer than" not in r.output


@pytest.mark.slow
def test_predict_sweep_predicts_levels_the_run_did_not_measure(run_dir):
    r = invoke(
        "plan", "--predict-sweep", run_dir, "--profile", "h100", "--fit", "all", "--extra-concurrency", "4,16", "--json"
    )
    assert r.exit_code == 0, r.output
    levels = {lv["level_id"]: lv for lv in json.loads(r.output)["levels"]}
    assert set(levels) == {"c1-in10-out11", "c4-in10-out11", "c16-in10-out11"}
    assert levels["c16-in10-out11"]["role"] == "not run" and levels["c16-in10-out11"]["measured"] is None
    assert levels["c16-in10-out11"]["predicted"]["output_tok_s"] > levels["c1-in10-out11"]["predicted"]["output_tok_s"]
    bad = invoke("plan", "--predict-sweep", run_dir, "--profile", "h100", "--extra-concurrency", "4,,x")
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def _one_level_run(path, sweep: dict, level: str, rate: float | None = None):
    records = [rec(i * 0.2, 0.01, 0.05, 11, level=level, concurrency=None if rate else 1, n_in=64) for i in range(20)]
    for r in records:
        r.request_rate = rate
    run = make_run(path, records, {level: (0, 4)}, model="tiny-test")
    info = run.read_info()
    info.sweep = type(info.sweep).from_dict({**info.sweep.to_dict(), **sweep})
    info.target.engine_args = ["--max-model-len", "512"]
    run.write_info(info)
    return run.path


def test_open_loop_levels_are_predicted_at_the_runs_own_arrival_rate(tmp_path):
    path = _one_level_run(
        tmp_path / "open",
        {
            "concurrency": [],
            "request_rate": [5.0],
            "input_lens": [64],
            "output_lens": [11],
            "warmup_s": 2.0,
            "duration_s": 20.0,
        },
        "r5-in64-out11",
        rate=5.0,
    )
    r = invoke("plan", "--predict-sweep", path, "--profile", "h100", "--json")
    assert r.exit_code == 0, r.output
    level = json.loads(r.output)["levels"][0]
    assert level["level_id"] == "r5-in64-out11"
    # Poisson arrivals at 5/s over a 20 s window: about 100 requests, each finishing well inside it.
    assert 60 <= level["predicted"]["n_requests"] <= 140
    assert level["predicted"]["req_s"] == pytest.approx(5.0, rel=0.3)


def test_shared_prefixes_of_an_ids_workload_hit_the_simulated_prefix_cache(tmp_path):
    workload = {
        "kind": "shared_prefix",
        "prompt_format": "ids",
        "vocab_size": 4096,
        "num_prefixes": 2,
        "prefix_len": 448,
        "suffixes_per_prefix": 4,
    }
    sweep = {
        "concurrency": [1],
        "input_lens": [500],
        "output_lens": [11],
        "warmup_s": 1.0,
        "duration_s": 5.0,
        "workload": workload,
    }
    path = _one_level_run(tmp_path / "prefix", sweep, "c1-in500-out11")
    # A slow machine (10 GFLOP/s), so that tiny-test's prefill costs by its length, not by launches.
    slow = published_profile("a100")
    slow = dataclasses.replace(slow, roofline=dataclasses.replace(slow.roofline, peak_flops=1e10))
    slow.save(tmp_path / "slow.json")
    shared = json.loads(invoke("plan", "--predict-sweep", path, "--profile", tmp_path / "slow.json", "--json").output)
    cold = json.loads(
        invoke(
            "plan",
            "--predict-sweep",
            path,
            "--profile",
            tmp_path / "slow.json",
            "--json",
            "--what-if",
            "enable_prefix_caching=false",
        ).output
    )
    # 448 of 500 prompt tokens come from the cache once each prefix is warm: a shorter prefill.
    assert shared["levels"][0]["predicted"]["ttft_p50_s"] < 0.8 * cold["levels"][0]["predicted"]["ttft_p50_s"]
    too_long = _one_level_run(tmp_path / "long", {**sweep, "input_lens": [512]}, "c1-in512-out11")
    r = invoke("plan", "--predict-sweep", too_long, "--profile", "a100")
    assert r.exit_code == 2 and "max_model_len 512" in r.output and "Traceback" not in r.output


def test_peak_rate_sizes_the_top_plan_as_a_fleet_under_each_policy():
    # A 70B model's steps are long, so each simulated fleet is few steps (a fast test, about 4 s).
    r = invoke(
        "plan",
        "--model",
        "llama-3-70b",
        "-c",
        "8",
        "--profile",
        "h100",
        "--no-quantize",
        "--input-len",
        "256",
        "--output-len",
        "16",
        "--top",
        "1",
        "--slo-tpot",
        "0.1",
        "--peak-rate",
        "30",
        "--max-replicas",
        "8",
    )
    print(r.output)
    assert r.exit_code == 0, r.output
    out = r.output[r.output.index("replicas for 30 requests/s") :]
    row = next(line for line in out.splitlines() if line.startswith("│"))
    cells = [c.strip() for c in row.split("│") if c.strip()]
    rr, lo = int(cells[2].split()[0]), int(cells[4].split()[0])
    assert 1 < rr <= 8 and 1 < lo <= 8
    assert ("both need" in out) == (rr == lo)
    assert f"round robin needs {rr} replica" in out or "both need" in out
    assert "one replica alone serves" in out and "one fewer did not" in out


def test_peak_rate_refuses_a_bad_rate_or_policy_in_one_line():
    for args, says in (
        (("--peak-rate", "0"), "the target rate must be > 0"),
        (("--peak-rate", "30", "--lb-policy", "random"), "--lb-policy is one of round-robin"),
        (("--peak-rate", "30", "--max-replicas", "0"), "--max-replicas"),
    ):
        r = invoke("plan", "--model", "llama-3-70b", "--profile", "h100", *args)
        assert r.exit_code == 2, r.output
        assert says in r.output and "No such option" not in r.output and "Traceback" not in r.output


def test_the_time_outside_the_server_is_the_clients_ttft_less_the_servers_own(run_dir):
    # The server's TTFT histogram (vLLM's names, per scrape interval) says each request waited 2 ms at
    # c1 (1 running) and 6 ms at c4 (4 running) less than the client saw: the time outside the server,
    # which the fit draws the request overhead through (tests/analyzers/plan/test_fit.py).
    from synth_run import T0

    from analyzers.plan.outside_server import outside_the_server

    run = RunDir(run_dir)
    assert outside_the_server(run) == {}  # no server histograms: nothing measured
    rows = []
    for start, ttft, running in ((0.0, 0.01 - 0.002, 1.0), (20.0, 0.03 - 0.006, 4.0)):
        for k in range(1, 11):
            rows.append({"t": T0 + start + k, "ttft_count": 3.0, "ttft_mean_s": ttft, "running": running})
    run.probe_file("server").parent.mkdir(parents=True, exist_ok=True)
    run.probe_file("server").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = outside_the_server(run)
    assert set(out) == {"c1-in10-out11", "c4-in10-out11"}
    assert out["c1-in10-out11"].outside_s == pytest.approx(0.002, abs=1e-6) and out["c1-in10-out11"].running == 1.0
    assert out["c4-in10-out11"].outside_s == pytest.approx(0.006, abs=1e-6) and out["c4-in10-out11"].running == 4.0
    # A histogram that counted far other requests than the client measured says nothing about them.
    run.probe_file("server").write_text("".join(json.dumps({**r, "ttft_count": 30.0}) + "\n" for r in rows))
    assert outside_the_server(run) == {}
