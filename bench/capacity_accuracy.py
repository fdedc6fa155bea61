"""Does `llmbench capacity` find a capacity we know? Against the slot server (tests/slot_server.py:
S slots, a request holds one for T = prefill + (out - 1) * itl), the capacity is S
users by concurrency and S / T req/s by rate (regular arrivals, or a trace of regular arrivals
replayed faster or slower). Each case runs the real CLI and records the answer beside the known
value: the point found, its error, whether the answer is established at 95% or a point estimate,
how many levels it measured and how long it took.

    python bench/capacity_accuracy.py [--plan "3s=concurrency,rate,trace 30s=concurrency,rate"] [--repeats 2] [--out F]

Each entry of --plan is a measured window per level and the cases run with it, all in one
invocation: short windows give point estimates in a few minutes; 30 s windows give loads enough
requests (299 with none over a P99 bound) to be established.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.loopback_server import start_script_server  # noqa: E402

SLOTS, PREFILL_MS, ITL_MS, OUT = 3, 30, 25, 16
SERVICE_S = (PREFILL_MS + (OUT - 1) * ITL_MS) / 1000
KNOWN_RATE = SLOTS / SERVICE_S


@dataclass
class Case:
    name: str
    known: float
    args: list[str]


@dataclass
class Outcome:
    case: str
    known: float
    found: float | None
    error: float | None  # found / known - 1
    low: float | None
    high: float | None
    established: bool  # the answer has a low end (some load clearly in)
    levels: int
    seconds: float
    headline: str
    window: str = ""  # the measured window per level it ran with


def _trace(path: Path, rate: float, n: int = 80) -> Path:
    path.write_text(
        "".join(
            json.dumps({"timestamp": round(i * 1000 / rate, 3), "input_length": 16, "output_length": OUT}) + "\n"
            for i in range(n)
        )
    )
    return path


def _cases(tmp: Path) -> list[Case]:
    return [
        Case("concurrency", SLOTS, []),
        Case("rate (regular arrivals)", KNOWN_RATE, ["--by", "rate", "--burstiness", "100", "--start", "2"]),
        Case(
            "trace (regular, 4 req/s at speed 1)",
            KNOWN_RATE,
            ["--workload", "trace", "--dataset", str(_trace(tmp / "trace.jsonl", 4.0))],
        ),
    ]


def _start_server() -> tuple[subprocess.Popen, str]:
    return start_script_server(
        ROOT / "tests/slot_server.py",
        "--slots",
        str(SLOTS),
        "--prefill-ms",
        str(PREFILL_MS),
        "--itl-ms",
        str(ITL_MS),
        name="the slot server",
    )


def run_case(case: Case, url: str, out: Path, duration: str, repeats: int) -> Outcome:
    cmd = [
        sys.executable,
        "-m",
        "llmbench.cli",
        "capacity",
        "--target",
        url,
        "--slo-ttft",
        "0.25",
        "--slo-tpot",
        "0.1",
        "--input-len",
        "16",
        "--output-len",
        str(OUT),
        "--warmup",
        "1s",
        "--duration",
        duration,
        "--probes",
        "none",
        "--request-timeout",
        "20s",
        "--repeats",
        str(repeats),
        "--out",
        str(out),
        "--json",
        *case.args,
    ]
    t0 = time.monotonic()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=1800, cwd=ROOT, env={**os.environ, "COLUMNS": "200"}
    )
    took = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{case.name}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    result = json.loads(proc.stdout)
    a = result["answer"]
    found = a["capacity"]
    return Outcome(
        case.name,
        round(case.known, 3),
        found,
        None if found is None else round(found / case.known - 1, 4),
        a["low"],
        a["high"],
        a["low"] is not None,
        len(result["probes"]),
        round(took, 1),
        a["headline"],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--plan",
        default="3s=concurrency,rate,trace 30s=concurrency,rate",
        help="Space-separated WINDOW=CASES entries: the measured window per level and the cases "
        "(concurrency, rate, trace) run with it.",
    )
    ap.add_argument("--repeats", type=int, default=2, help="Measurements of each boundary load.")
    ap.add_argument("--out", default=str(ROOT / "bench/capacity_accuracy.json"))
    args = ap.parse_args()
    plan = [
        (window, {c.strip() for c in cases.split(",") if c.strip()})
        for window, _, cases in (entry.partition("=") for entry in args.plan.split())
    ]
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    server, url = _start_server()
    outcomes = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for window, wanted in plan:
                for case in (c for c in _cases(Path(tmp)) if c.name.split()[0] in wanted):
                    o = run_case(case, url, Path(tmp) / f"run{len(outcomes)}", window, args.repeats)
                    o.window = window
                    outcomes.append(o)
                    print(
                        f"{window} {o.case}: known {o.known:g}, found {o.found} ({o.error:+.1%}), "
                        f"{'established' if o.established else 'point estimate'}, {o.levels} levels, {o.seconds} s",
                        flush=True,
                    )
    finally:
        server.kill()
    from bench.common import machine

    Path(args.out).write_text(
        json.dumps(
            {
                "command": " ".join(sys.argv),
                "started": started,
                "finished": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "machine": machine(),
                "plan": args.plan,
                "repeats": args.repeats,
                "outcomes": [asdict(o) for o in outcomes],
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
