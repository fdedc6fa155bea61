"""Does `llmdiag p99` name the real cause? Each case plants one cause for real on this machine,
runs `llmbench sweep` with short levels, diagnoses the run and reports the ranked findings and
whether the planted cause came first (issue 18).

Cases: clean runs (no finding expected); an admission limit far below the load; a KV cache too
small for the load; long prompts with chunked prefill off (head-of-line); CPU burners beside the
CPU-bound engine, switched on mid-window; packet loss switched on mid-window on a veth into a
network namespace holding the server; background retransmits on other flows while an admission
limit acts (the network must not be blamed); the README's main job (saturation); and two fleets of
two replicas: one replica with a KV cache for three requests (a hot replica), and equal replicas
behind round robin under a heavy-tailed output-length mix (a routing imbalance). On real vLLM
(bench/diagnosis_vllm.py): an admission limit, a KV cache too small, CPU burners.

    python bench/diagnosis_accuracy.py [--cases a,b] [--out bench/diagnosis_accuracy.json]

Network cases need root, `ip` and `iptables`; they are skipped with the reason otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.diagnosis_faults import BackgroundFlow, Burners, LossyNamespace, Toggler, netns_unavailable
from bench.diagnosis_vllm import vllm_cases

SHORT = ["--warmup", "2s", "--duration", "10s", "--probes", "server,host,tcp"]
SMALL = ["--model", "tiny-test", "--input-len", "32", "--output-len", "16"]
FAULT_WINDOWS = [(4.0, 7.0), (9.0, 12.0)]  # seconds after the first finished request
# Burners: many of them, so that they stand
# out against a shared host's steady background of other users' processes.
BURNER_WINDOWS = [(4.0, 7.0), (9.0, 12.0)]


@dataclass
class CaseResult:
    case: str
    planted: str  # what was planted, in words
    expected: list[str]  # check ids that name it ([] = no finding expected)
    findings: list[dict] = field(default_factory=list)  # ranked: check_id, coverage, title
    context: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    first_ok: bool = False
    skipped: str | None = None
    seconds: float = 0.0
    run_dir: str = ""
    effect: float | None = None  # realized: TTFT median inside the fault's windows / outside


def sweep(out: Path, args: list[str], timeout_s: float = 420, prefix: list[str] | None = None) -> subprocess.Popen:
    """`llmbench sweep ARGS --out OUT`, behind `prefix` (e.g. taskset) when given."""
    cmd = [*(prefix or []), sys.executable, "-m", "llmbench.cli", "sweep", *args, "--out", str(out)]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ, COLUMNS="120")
    )


def finish(proc: subprocess.Popen, timeout_s: float = 420) -> None:
    out, _ = proc.communicate(timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"sweep failed (exit {proc.returncode}): {out[-1500:]}")


def diagnose(run_dir: Path, res: CaseResult) -> None:
    from analyzers.triage.p99 import diagnose_p99, diagnosis_record, save_diagnosis
    from rundir import RunDir

    diag = diagnose_p99(RunDir(run_dir))
    save_diagnosis(RunDir(run_dir), diagnosis_record(diag))
    res.findings = [
        {"check_id": f.check_id, "coverage": round(f.coverage, 2), "severity": f.severity, "title": f.title}
        for f in diag.findings
    ]
    res.context = [f"{f.check_id} ({f.coverage:.0%}): {f.title}" for f in diag.context]
    res.notes = diag.notes
    first = diag.findings[0].check_id if diag.findings else None
    res.first_ok = (first is None) if not res.expected else (first in res.expected)


def run_embedded(tmp: Path, name: str, args: list[str], fault=None, windows=FAULT_WINDOWS) -> Path:
    out = tmp / name
    proc = sweep(out, args)
    toggler = None
    if fault is not None:
        toggler = Toggler(out, fault[0], fault[1], windows)
        toggler.start()
    try:
        finish(proc)
    finally:
        if toggler is not None:
            toggler.join(timeout=60)
            fault[1]()
    if toggler is not None and toggler.error:
        raise RuntimeError(f"fault toggling failed: {toggler.error}")
    return out


def case_clean(tmp: Path, res: CaseResult) -> Path:
    return run_embedded(tmp, res.case, [*SMALL, "--concurrency", "2", *SHORT])


# An admission limit is a standing tail against the unloaded baseline (c1): on a quiet machine the
# tiny-test engine keeps even c16 behind --max-num-seqs=2 inside the 1.5 s TTFT SLO (P99 0.9 s), so a
# lone c16 level had no yardstick and nothing to explain.
ADMISSION_LEVELS = ["--concurrency", "1,16", "--engine-arg=--max-num-seqs=2"]


def case_admission(tmp: Path, res: CaseResult) -> Path:
    return run_embedded(tmp, res.case, [*SMALL, *ADMISSION_LEVELS, *SHORT])


def case_kv(tmp: Path, res: CaseResult) -> Path:
    # 32 + 96 tokens = 8 blocks of 16 per request; 24 blocks hold 3 such requests, the load is 16.
    return run_embedded(
        tmp,
        res.case,
        [
            "--model",
            "tiny-test",
            "--input-len",
            "32",
            "--output-len",
            "96",
            "--concurrency",
            "16",
            "--engine-arg=--num-gpu-blocks-override=24",
            "--engine-arg=--max-model-len=256",
            "--engine-arg=--block-size=16",
            *SHORT,
        ],
    )


def case_hol(tmp: Path, res: CaseResult) -> Path:
    # 3000-token prompts: a long prefill must take far longer than the noise of a shared host, as
    # on a real engine where it takes hundreds of milliseconds (the `tiny` model is too slow here to
    # measure more than a handful of requests in a short level).
    return run_embedded(
        tmp,
        res.case,
        [
            "--model",
            "tiny-test",
            "--workload",
            "mixed",
            "--input-len",
            "32",
            "--long-len",
            "3000",
            "--long-fraction",
            "0.15",
            "--output-len",
            "16",
            "--concurrency",
            "4",
            "--engine-arg=--no-enable-chunked-prefill",
            "--warmup",
            "2s",
            "--duration",
            "15s",
            "--probes",
            "server,host,tcp",
        ],
    )


def case_cpu(tmp: Path, res: CaseResult) -> Path:
    burners = Burners(int(os.environ.get("BURNERS", "8")))
    return run_embedded(
        tmp, res.case, [*SMALL, "--concurrency", "4", *SHORT], (burners.start, burners.stop), BURNER_WINDOWS
    )


def case_netloss(tmp: Path, res: CaseResult) -> Path:
    return run_lossy(tmp / res.case, LossyNamespace("llmbdiag1", 231, 18431, 0.3), 4, FAULT_WINDOWS, SHORT)


def run_lossy(
    out: Path, namespace: LossyNamespace, concurrency: int, windows: list[tuple[float, float]], timing: list[str]
) -> Path:
    """A sweep of a server inside a lossy network namespace, the loss switched on over `windows`."""
    from refengine.model.tiny import resolve_model

    with namespace as ns:
        port = ns.port
        server = subprocess.Popen(
            [
                *ns.exec_prefix(),
                sys.executable,
                "-m",
                "refengine.server",
                "--model",
                "tiny-test",
                "--host",
                ns.ns_ip,
                "--port",
                str(port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_up(f"http://{ns.ns_ip}:{port}/health")
            # The server runs inside the namespace: `ip netns exec` runs it as its own child.
            proc = sweep(
                out,
                [
                    "--target",
                    f"http://{ns.ns_ip}:{port}",
                    "--model",
                    "tiny-test",
                    "--tokenizer",
                    str(resolve_model("tiny-test")),
                    "--input-len",
                    "32",
                    "--output-len",
                    "16",
                    "--concurrency",
                    str(concurrency),
                    "--server-pid",
                    str(server.pid),
                    *timing,
                ],
            )
            toggler = Toggler(out, lambda: ns.set_loss(True), lambda: ns.set_loss(False), windows)
            toggler.start()
            try:
                finish(proc)
            finally:
                toggler.join(timeout=60)
                ns.set_loss(False)
        finally:
            server.kill()
            server.wait(timeout=10)
    return out


def case_background_retrans(tmp: Path, res: CaseResult) -> Path:
    with LossyNamespace("llmbdiag2", 232, 18432, 0.3) as ns:
        flow = BackgroundFlow(ns, seconds=90)
        flow.start()
        try:
            return run_embedded(tmp, res.case, [*SMALL, *ADMISSION_LEVELS, *SHORT])
        finally:
            flow.seconds = 0
            flow.join(timeout=30)
            flow.stop()


def case_main_job(tmp: Path, res: CaseResult) -> Path:
    # The README's command as it is (default model, 5 s warm-up, 20 s levels): shorter levels end
    # before a c=64 request of the `tiny` model can finish on a 2-core host.
    return run_embedded(tmp, res.case, ["--concurrency", "1,8,32,64"])


def case_main_job_small(tmp: Path, res: CaseResult) -> Path:
    # The same levels with the small model, whose requests finish even on a loaded 2-core host.
    return run_embedded(tmp, res.case, ["--model", "tiny-test", "--concurrency", "1,8,32,64", *SHORT])


# A fleet's hot replica: 32 + 32 tokens = 4 blocks of 16, so 12 blocks hold three of the eight requests.
HOT_REPLICA_KV = ["--num-gpu-blocks-override", "12", "--block-size", "16", "--max-model-len", "128"]


def case_hot_replica(tmp: Path, res: CaseResult) -> Path:
    """Two refengine servers driven URL by URL (the client's round robin), the second with a small KV cache."""
    out = tmp / res.case
    servers = [_serve([]), _serve(HOT_REPLICA_KV)]
    try:
        urls = [_wait_up_url(port) for _, port in servers]
        finish(
            sweep(
                out,
                [
                    "--target",
                    ",".join(urls),
                    "--model",
                    "tiny-test",
                    "--input-len",
                    "32",
                    "--output-len",
                    "32",
                    "--concurrency",
                    "8",
                    *SHORT,
                ],
            )
        )
    finally:
        for proc, _ in servers:
            proc.kill()
            proc.wait(timeout=10)
    return out


def heavy_tailed_trace(path: Path, seconds: float = 30.0, rate: float = 6.0, seed: int = 0) -> Path:
    """A Mooncake JSONL trace (docs/workloads.md) of Poisson arrivals whose output lengths are
    heavy-tailed: 85% ask for 8 tokens, 15% for 100-400 (lognormal), prompts of 32 tokens."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t, rows, i = 0.0, [], 0
    while t < seconds:
        t += float(rng.exponential(1.0 / rate))
        long = rng.random() < 0.15
        out_len = int(np.clip(rng.lognormal(np.log(200), 0.4), 100, 400)) if long else 8
        rows.append(
            json.dumps(
                {
                    "timestamp": int(t * 1000),
                    "input_length": 32,
                    "output_length": out_len,
                    "hash_ids": [2 * i, 2 * i + 1],
                }
            )
        )
        i += 1
    path.write_text("\n".join(rows) + "\n")
    return path


def case_fleet_imbalance(tmp: Path, res: CaseResult) -> Path:
    """Two equal replicas of 2 running requests each behind the fleet front's round robin, a heavy-tailed
    output mix sent at its times: a replica busy with long requests keeps being handed short ones."""
    trace = heavy_tailed_trace(tmp / f"{res.case}-trace.jsonl")
    return run_embedded(
        tmp,
        res.case,
        [
            "--model",
            "tiny-test",
            "--data-parallel-size",
            "2",
            "--lb-policy",
            "round-robin",
            "--engine-arg=--max-num-seqs=2",
            "--workload",
            "trace",
            "--dataset",
            str(trace),
            "--block-size",
            "16",
            "--probes",
            "server,host,tcp",
        ],
    )


def _serve(args: list[str]) -> tuple[subprocess.Popen, int]:
    from rundir.ports import free_port

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "refengine.server", "--model", "tiny-test", "--port", str(port), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return proc, port


def _wait_up_url(port: int) -> str:
    url = f"http://127.0.0.1:{port}"
    _wait_up(url + "/health")
    return url


def _wait_up(url: str, timeout_s: float = 120) -> None:
    import urllib.request

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not come up in {timeout_s:.0f} s")


CASES = {
    "clean": (case_clean, "nothing (tiny-test, c=2)", [], False),
    "clean-2": (case_clean, "nothing, again (tiny-test, c=2)", [], False),
    "admission": (
        case_admission,
        "--max-num-seqs=2 at concurrency 16 (c1 as the baseline)",
        ["p99.sched.admission"],
        False,
    ),
    "kv-capacity": (
        case_kv,
        "24 KV blocks of 16 for 16 requests of 128 tokens",
        ["p99.sched.kv-capacity", "p99.sched.preemption"],
        False,
    ),
    "head-of-line": (
        case_hol,
        "3000-token prompts among 32-token ones (15%), chunked prefill off",
        ["p99.sched.long-prefill", "p99.sched.prefill-time"],
        False,
    ),
    "cpu-burners": (case_cpu, "8 busy-loop processes beside the engine, twice 3 s mid-window", ["p99.host.cpu"], False),
    "packet-loss": (
        case_netloss,
        "30% random drop into the server's namespace, twice 3 s mid-window",
        ["p99.net.retransmits"],
        True,
    ),
    "background-retrans": (
        case_background_retrans,
        "--max-num-seqs=2 at c=16 (c1 baseline) while another flow loses 30%",
        ["p99.sched.admission"],
        True,
    ),
    "main-job": (
        case_main_job,
        "README main job: --concurrency 1,8,32,64 (default model, 5 s + 20 s levels)",
        ["p99.sched.saturation"],
        False,
    ),
    "main-job-small": (
        case_main_job_small,
        "the main job's levels with tiny-test (2 s + 10 s levels)",
        ["p99.sched.saturation"],
        False,
    ),
    "hot-replica": (
        case_hot_replica,
        "two replicas driven URL by URL at c=8, the second with a KV cache for 3 requests",
        ["p99.fleet.hot-replica"],
        False,
    ),
    "fleet-imbalance": (
        case_fleet_imbalance,
        "two equal replicas (--max-num-seqs 2) behind round robin, Poisson "
        "6 req/s for 30 s, outputs 85% 8 tokens and 15% 100-400",
        ["p99.fleet.imbalance"],
        False,
    ),
}
CASES.update(vllm_cases(finish, Toggler, Burners, BURNER_WINDOWS))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--out", default=str(Path(__file__).with_name("diagnosis_accuracy.json")))
    ap.add_argument("--keep", default=None, help="keep the run directories under this folder")
    ap.add_argument(
        "--rediagnose",
        default=None,
        help="diagnose the kept runs under this folder again (the "
        "analysis changed, the runs did not) instead of running the cases",
    )
    a = ap.parse_args()
    if a.rediagnose:
        return rediagnose(Path(a.rediagnose), a.cases.split(","), Path(a.out))
    tmp = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="diag-accuracy-"))
    tmp.mkdir(parents=True, exist_ok=True)
    results = []
    load_before = os.getloadavg()
    for name in a.cases.split(","):
        fn, planted, expected, needs_netns = CASES[name]
        res = CaseResult(name, planted, expected)
        why = netns_unavailable() if needs_netns else None
        t0 = time.time()
        if why:
            res.skipped = why
        else:
            try:
                run_dir = fn(tmp, res)
                res.run_dir = str(run_dir)
                diagnose(run_dir, res)
            except Exception as exc:  # noqa: BLE001 - one broken case must not hide the others
                res.skipped = f"failed: {type(exc).__name__}: " + " ".join(str(exc).split())[:300]
        res.seconds = round(time.time() - t0, 1)
        results.append(res)
        print(_line(res), flush=True)
    Path(a.out).write_text(
        json.dumps(
            {
                "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "loadavg_before": load_before,
                "loadavg_after": os.getloadavg(),
                "cases": [asdict(r) for r in results],
            },
            indent=1,
        )
    )
    print(table(results))
    return 0


def rediagnose(folder: Path, names: list[str], out: Path) -> int:
    previous = json.loads(out.read_text()) if out.exists() else {}
    before = {c["case"]: c for c in previous.get("cases", [])}
    results = []
    for name in names:
        _, planted, expected, _ = CASES[name]
        res = CaseResult(name, planted, expected)
        old = before.get(name, {})
        res.seconds, res.skipped = old.get("seconds", 0.0), old.get("skipped")
        if (folder / name / "run.json").exists():
            res.run_dir, res.skipped = str(folder / name), None
            diagnose(folder / name, res)
        results.append(res)
        print(_line(res), flush=True)
    out.write_text(
        json.dumps(
            {
                **{k: v for k, v in previous.items() if k != "cases"},
                "rediagnosed": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "cases": [asdict(r) for r in results],
            },
            indent=1,
        )
    )
    print(table(results))
    return 0


def _line(r: CaseResult) -> str:
    if r.skipped:
        return f"{r.case}: skipped ({r.skipped})"
    first = r.findings[0]["check_id"] if r.findings else "no finding"
    return f"{r.case}: {'OK ' if r.first_ok else 'MISS'} first={first} ({r.seconds:.0f} s)"


def table(results: list[CaseResult]) -> str:
    rows = [
        "| case | planted | expected first | ranked findings (share of the tail) | first right |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in results:
        got = (
            "; ".join(f"{i}. {f['check_id']} ({f['coverage']:.0%})" for i, f in enumerate(r.findings, 1))
            or "no finding"
        )
        verdict = f"skipped: {r.skipped}" if r.skipped else ("yes" if r.first_ok else "**no**")
        rows.append(f"| {r.case} | {r.planted} | {', '.join(r.expected) or 'nothing'} | {got} | {verdict} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
