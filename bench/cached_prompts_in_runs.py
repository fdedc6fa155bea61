"""How much did one seed for every level cost? Reads run directories recorded before each level had
prompts of its own (docs/metrics.md, "Every level's prompts are its own") and, per level, splits
the window's requests into those whose prompt an earlier level of the same input length had sent
(request i of every level was the same prompt, so a request whose position in its level is below
the most any earlier level sent was a prefix-cache hit on a server that kept it) and the fresh
ones, with each group's TTFT P50. Measures nothing: it reads the records.

    python bench/cached_prompts_in_runs.py RUN [RUN ...] [--out bench/cached_prompts_in_runs.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import print_table, write_json  # noqa: E402


def _input_len(level_id: str) -> str:
    return next((part for part in level_id.split("-") if part.startswith("in")), "")


def run_levels(run: Path) -> list[dict]:
    by_level: dict[str, list[dict]] = defaultdict(list)
    for line in (run / "requests.jsonl").read_text().splitlines():
        rec = json.loads(line)
        by_level[rec["level_id"]].append(rec)
    sent_before: dict[str, int] = defaultdict(int)  # input length -> the most requests an earlier level sent
    out = []
    for level_id, recs in by_level.items():  # in the order the run recorded them
        recs.sort(key=lambda r: r["t_sent"])
        seen = sent_before[_input_len(level_id)]
        window = [(i, r) for i, r in enumerate(recs) if r["in_window"] and r.get("ttft_s") is not None]
        cached = [r["ttft_s"] for i, r in window if i < seen]
        fresh = [r["ttft_s"] for i, r in window if i >= seen]
        out.append(
            {
                "run": run.name,
                "level_id": level_id,
                "window": len(window),
                "resent": len(cached),
                "resent_share": len(cached) / len(window) if window else None,
                "ttft_p50_resent_s": statistics.median(cached) if cached else None,
                "ttft_p50_fresh_s": statistics.median(fresh) if fresh else None,
            }
        )
        sent_before[_input_len(level_id)] = max(seen, len(recs))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+")
    p.add_argument("--out", default=str(ROOT / "bench" / "cached_prompts_in_runs.json"))
    a = p.parse_args()
    levels = [lv for run in a.runs for lv in run_levels(Path(run))]

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1e3:.1f}"

    print_table(
        "window requests resending an earlier level's prompt",
        ["run", "level", "window", "resent", "TTFT P50 resent ms", "TTFT P50 fresh ms"],
        [
            [
                lv["run"],
                lv["level_id"],
                lv["window"],
                lv["resent"],
                ms(lv["ttft_p50_resent_s"]),
                ms(lv["ttft_p50_fresh_s"]),
            ]
            for lv in levels
        ],
    )
    write_json(a.out, {"bench": "cached_prompts_in_runs", "args": vars(a), "levels": levels})


if __name__ == "__main__":
    main()
