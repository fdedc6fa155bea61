"""How far apart are repeated measurements of one open-loop level? The floor under its prediction's error.

bench/measurement_repeatability.py compares closed-loop levels of two plan benches; their open-loop
levels cannot be compared that way (each bench offers a share of its own measured peak). Here the
same level is measured again and again in one invocation: the embedded engine serving the plan
bench's random Llama (or any model), `llmbench sweep` at one request rate with the same seed (the
same Poisson arrival times and prompts each run), alternating with a closed-loop level of about the
same load as the yardstick. Before each run a float32 matmul says how fast the host was then.

Per run: TTFT P50, TPOT P50, the inter-token gaps' P50 and the share of gaps over twice it (steps
slowed by a prefill or by the host), output tokens/s. Per kind: the median, the range and the median
|run - median| / median of each, the spread a single run of that level is read against.

    python bench/open_loop_repeatability.py --out bench/open_loop_repeatability.json   # ~6 min on 2 cores
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the project first

import numpy as np

from bench.common import machine, matmul_peak, print_table, write_json
from bench.plan_accuracy import _model_path, _run
from rundir import RunDir
from rundir.table import RequestTable

METRICS = ("ttft_p50_ms", "tpot_p50_ms", "itl_p50_ms", "slow_gap_share", "output_tok_s")


def measure(model: str, load: list[str], a, out: Path) -> dict:
    gflops = matmul_peak([(2048, 2048, 2048)])["2048x2048 @ 2048x2048"] / 1e9
    _run(
        ["llmbench.cli", "sweep", "--model", model, *load, "--input-len", str(a.input_len)]
        + ["--output-len", str(a.output_len), "--warmup", a.warmup, "--duration", a.duration]
        + ["--slo-ttft", "60", "--out", str(out)]
    )
    level = json.loads((out / "summary.json").read_text())["levels"][0]
    table = RequestTable.load(RunDir(out))
    window = np.flatnonzero(table.df["in_window"].to_numpy(bool))
    gaps = table.itl[np.isin(table.itl_row, window)]
    itl_p50 = float(np.median(gaps))
    return {
        "matmul_gflops_before": round(gflops, 1),
        "n_in_window": level["n_in_window"],
        "ttft_p50_ms": level["ttft"]["p"]["p50"] * 1e3,
        "tpot_p50_ms": level["tpot"]["p"]["p50"] * 1e3,
        "itl_p50_ms": itl_p50 * 1e3,
        "slow_gap_share": float(np.mean(gaps > 2 * itl_p50)),
        "output_tok_s": level["output_tok_s"],
    }


def spread(runs: list[dict]) -> dict:
    out = {}
    for k in METRICS:
        xs = [r[k] for r in runs]
        med = statistics.median(xs)
        out[k] = {
            "median": med,
            "min": min(xs),
            "max": max(xs),
            "median_abs_dev_rel": statistics.median(abs(x - med) / med for x in xs) if med else None,
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="random", help="'random' (the plan bench's 512-hidden Llama) or a preset")
    p.add_argument("--rate", type=float, default=7.0, help="open-loop requests/s (random: ~70%% of its peak)")
    p.add_argument("--concurrency", type=int, default=8, help="the closed-loop level beside it")
    p.add_argument("--repeats", type=int, default=4, help="runs of each kind, alternating")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--warmup", default="5")
    p.add_argument("--duration", default="15")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    kinds = {"closed": ["--concurrency", str(a.concurrency)], "open": ["--request-rate", str(a.rate)]}
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="open-loop-repeat-") as tmp:
        model = _model_path(a.model, Path(tmp))
        for i in range(a.repeats):
            for kind, load in kinds.items():
                runs[kind].append(measure(model, load, a, Path(tmp) / f"{kind}-{i}"))
                print(f"{kind} #{i + 1}: {json.dumps({k: round(v, 3) for k, v in runs[kind][-1].items()})}")
    rows = [
        [
            kind,
            i + 1,
            r["matmul_gflops_before"],
            *(f"{r[k]:.3f}" if k == "slow_gap_share" else f"{r[k]:.1f}" for k in METRICS),
        ]
        for kind in kinds
        for i, r in enumerate(runs[kind])
    ]
    print_table("one level, measured again and again", ["kind", "run", "matmul GFLOP/s", *METRICS], rows)
    spreads = {kind: spread(rs) for kind, rs in runs.items()}
    for kind, s in spreads.items():
        print(
            f"{kind}: "
            + ", ".join(
                f"{k} {v['min']:.3g}-{v['max']:.3g} (median |dev| {v['median_abs_dev_rel']:.1%})" for k, v in s.items()
            )
        )
    write_json(a.out, {"machine": machine(), "args": vars(a), "runs": runs, "spread": spreads})


if __name__ == "__main__":
    main()
