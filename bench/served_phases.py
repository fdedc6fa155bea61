"""Where a run's TTFT goes, measured and simulated: outside the server, in its queue, in the prefill phase.

For each level of a run, the server's own histograms (vLLM's names, which refengine's server
publishes: `vllm:request_queue_time_seconds`, `vllm:request_prefill_time_seconds`, TTFT) give the
mean queue (arrival to first scheduled) and prefill phase (first scheduled to first token) of the
level's measured requests, and the client's TTFT minus the server's the time outside it; the planner's
simulation of the same level (`llmdiag plan --predict-sweep`, the same profile and fit) gives the same
three from its own requests' timestamps. A TTFT miss of the planner is then placed: in what it
assumes outside the server (the fitted request overhead), in a queue it does not form, or in steps it
prices short.

    python bench/served_phases.py RUN --profile FILE [--fit LEVEL,LEVEL] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from analyzers.plan import simulate  # noqa: E402
from analyzers.probe_series import read_probe  # noqa: E402
from analyzers.triage.phases import level_phases  # noqa: E402
from analyzers.triage.throughout import level_windows  # noqa: E402
from rundir import RunDir  # noqa: E402
from rundir.table import RequestTable  # noqa: E402


def measured_phases(run_dir: str) -> dict[str, dict[str, float]]:
    """Level id -> mean client TTFT and the server's mean queue, prefill and TTFT (seconds)."""
    run = RunDir(run_dir)
    server = read_probe(run.probe_file("server"), "server")
    if server is None:
        raise SystemExit(f"{run_dir}: no server probe with histograms in this run")
    table = RequestTable.load(run)
    df = table.df
    ttft = df["ttft_s"].to_numpy(float)
    ok = df["in_window"].to_numpy(bool) & (df["status"] == "ok").to_numpy() & np.isfinite(ttft)
    rows = table.level_rows()
    out = {}
    for level_id, window in level_windows(table, "ttft").items():
        measured = rows[level_id][ok[rows[level_id]]]
        if not measured.size:
            continue
        srv = level_phases(table, level_id, measured, window, server, None).server
        out[level_id] = {
            "client_ttft_s": float(np.mean(ttft[measured])),
            "queue_s": srv.get("queue_time_mean_s"),
            "prefill_s": srv.get("prefill_time_mean_s"),
            "server_ttft_s": srv.get("ttft_mean_s"),
            "running": srv.get("running_mean"),
        }
    return out


def simulated_phases(run_dir: str, profile: str, fit: str | None) -> dict[str, dict[str, float]]:
    """Level id -> the simulation's mean outside, queue and prefill (seconds) over its window's requests,
    from `llmdiag plan --predict-sweep` run in this process with every simulated request kept."""
    runs: dict[int, tuple[simulate.EngineRun, list]] = {}
    send = simulate.EngineRun.send

    def keeping(self, t, index=None):
        before = set(self.requests)
        send(self, t, index)
        kept = runs.setdefault(id(self), (self, []))[1]
        kept.extend(self.requests[rid] for rid in set(self.requests) - before)

    simulate.EngineRun.send = keeping
    from llmbench.diag_cli import app

    args = ["plan", "--predict-sweep", run_dir, "--profile", profile, "--json"] + (["--fit", fit] if fit else [])
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            app(args, standalone_mode=False)
    finally:
        simulate.EngineRun.send = send
    predicted_ids = [lv["level_id"] for lv in json.loads(printed.getvalue())["levels"]]
    # The fit simulates its levels first; the last simulation of each level is the reported one, in the
    # order the prediction lists them.
    finals = list(runs.values())[-len(predicted_ids) :]
    out = {}
    for level_id, (engine_run, requests) in zip(predicted_ids, finals):
        done = [
            r
            for r in requests
            if r.timestamps.first_token is not None
            and engine_run.window.contains(engine_run.records[r.request_id].t_sent)
        ]
        if not done:
            continue
        out[level_id] = {
            "outside_s": statistics.mean(r.timestamps.arrival - engine_run.records[r.request_id].t_sent for r in done),
            "queue_s": statistics.mean(r.timestamps.first_scheduled - r.timestamps.arrival for r in done),
            "prefill_s": statistics.mean(r.timestamps.first_token - r.timestamps.first_scheduled for r in done),
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="a run directory (llmbench sweep --out) whose server published histograms")
    p.add_argument("--profile", required=True, help="a machine profile (llmdiag calibrate)")
    p.add_argument("--fit", default=None, help="levels to fit the profile to, as llmdiag plan --fit takes them")
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    a = p.parse_args()
    measured = measured_phases(a.run)
    simulated = simulated_phases(a.run, a.profile, a.fit)

    def ms(v):
        return "-" if v is None else f"{v * 1e3:.2f}"

    print("| level | running (server) | outside: measured / simulated ms | queue | prefill phase |")
    print("| --- | --- | --- | --- | --- |")
    for level_id, m in measured.items():
        s = simulated.get(level_id, {})
        outside = None if m["server_ttft_s"] is None else m["client_ttft_s"] - m["server_ttft_s"]
        print(
            f"| {level_id} | {m['running'] if m['running'] is None else round(m['running'], 1)} | "
            f"{ms(outside)} / {ms(s.get('outside_s'))} | {ms(m['queue_s'])} / {ms(s.get('queue_s'))} | "
            f"{ms(m['prefill_s'])} / {ms(s.get('prefill_s'))} |"
        )
    if a.out:
        Path(a.out).write_text(json.dumps({"args": vars(a), "measured": measured, "simulated": simulated}, indent=1))


if __name__ == "__main__":
    main()
