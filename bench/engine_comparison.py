"""Two engines' levels side by side (bench/vs_vllm.py): each level's row from a sweep's summary, the
users' own rate beside the window's, one engine's rounds pooled, the ratios, and the Markdown tables.
What measures them (the servers, the sweeps) stays in vs_vllm.py."""

from __future__ import annotations

from cores import core_list

from analyzers.stats.users_cycle import UsersCycle


def level_row(lv: dict) -> dict:
    def p50_ms(d):
        p50 = (d or {}).get("p", {}).get("p50")
        return None if p50 is None else round(1e3 * p50, 2)

    def mean_ms(d):
        mean = (d or {}).get("mean")
        return None if mean is None else round(1e3 * mean, 2)

    clean = not any(n.startswith("INVALID") for n in lv.get("notes", [])) and lv.get("n_error", 0) == 0
    return {
        "level_id": lv["level_id"],
        "concurrency": lv["concurrency"],
        "input_len": lv["input_len"],
        "n_ok": lv["n_ok"],
        "ttft_p50_ms": p50_ms(lv.get("ttft")),
        "tpot_p50_ms": p50_ms(lv.get("tpot")),
        # A few closed-loop users lock into groups whose prefills stall each other's decodes once per
        # request; TPOT P50 then tells which split a run got, the mean what a step costs (issue 26).
        "tpot_mean_ms": mean_ms(lv.get("tpot")),
        "output_tok_s": None if lv.get("output_tok_s") is None else round(lv["output_tok_s"], 2),
        "cycle_tok_s": cycle_tok_s(lv),
        "burst_streams": lv.get("burst_streams"),
        "clean": clean and lv["n_ok"] > 0,
        "why_not": (
            "; ".join(n for n in lv.get("notes", []) if n.startswith("INVALID"))[:200]
            or (None if lv["n_ok"] else "no request of the window finished")
        ),
    }


def cycle_tok_s(lv: dict) -> float | None:
    """The users' own rate, as the sweep's users-cycle check computes it (Little's law): where the
    window's depends on where it cut a convoy's bursts (64 users in phase), this does not."""
    e2e = (lv.get("e2e") or {}).get("mean")
    out = lv.get("output_tokens_mean")
    if not (lv.get("concurrency") and e2e and out and lv.get("window_s")):
        return None
    return round(UsersCycle(lv["concurrency"], e2e, out, lv["window_s"], lv.get("output_tok_s") or 0.0).cycle_tok_s, 2)


ENGINES = ("refengine", "vllm")
POOLED = ("ttft_p50_ms", "tpot_p50_ms", "tpot_mean_ms", "output_tok_s", "cycle_tok_s")


def run_of(results: list[dict], engine: str, dtype: str, round_no: int) -> dict:
    return next(r for r in results if (r["engine"], r["dtype"], r["round"]) == (engine, dtype, round_no))


def pool(rounds: list[list[dict]]) -> list[dict]:
    """One engine's levels over its rounds: each figure the mean of the rounds', clean only if every
    round was, and `cycle_spread`, its highest users' own rate over its lowest (the repeatability)."""
    out = []
    for rows in zip(*rounds):
        assert len({r["level_id"] for r in rows}) == 1, "every round measures the same levels"
        row = {k: rows[0][k] for k in ("level_id", "concurrency", "input_len")}
        row["n_ok"] = sum(r["n_ok"] for r in rows)
        for k in POOLED:
            values = [r[k] for r in rows]
            row[k] = None if None in values else round(sum(values) / len(values), 2)
        cycles = [r["cycle_tok_s"] for r in rows]
        row["cycle_spread"] = None if None in cycles or not min(cycles) else round(max(cycles) / min(cycles), 3)
        row["clean"] = all(r["clean"] for r in rows)
        row["why_not"] = "; ".join(r["why_not"] for r in rows if r["why_not"]) or None
        out.append(row)
    return out


def ratios(ours: dict, theirs: dict) -> dict:
    if not (ours["clean"] and theirs["clean"]):
        return {"ratio": None}

    def div(a, b):
        return None if a is None or not b else round(a / b, 3)

    return {
        "throughput_ratio": div(ours["output_tok_s"], theirs["output_tok_s"]),
        "cycle_ratio": div(ours.get("cycle_tok_s"), theirs.get("cycle_tok_s")),
        "tpot_ratio": div(ours["tpot_p50_ms"], theirs["tpot_p50_ms"]),
        "tpot_mean_ratio": div(ours["tpot_mean_ms"], theirs["tpot_mean_ms"]),
        "ttft_ratio": div(ours["ttft_p50_ms"], theirs["ttft_p50_ms"]),
    }


def markdown(out: dict) -> str:
    h = out["host"]
    lines = [
        f"`{out['command']}`",
        "",
        f"Host: {h['cpu_model']}, {h['cores']} cores, float32 matmul {h['matmul_f32_gflops']} GFLOP/s; "
        f"servers on core(s) {core_list(h['server_cores'])}, the sweep on {core_list(h['client_cores'])}; "
        f"load average at start {h['loadavg_start']}.",
        "",
    ]
    runs = out["runs"]
    if len({r["round"] for r in runs}) > 1:
        lines += [
            "Matmul GFLOP/s on the server cores before each server: "
            + ", ".join(f"{r['dtype']} {r['engine']} {r['server_cores_matmul_gflops']}" for r in runs),
            "",
            "Pooled over the rounds (each figure the mean of the rounds'; spread = an engine's highest users' own "
            "rate over its lowest):",
            "",
            *table(out["pooled"], spread=True),
            "",
        ]
    for round_no in sorted({r["round"] for r in runs}):
        rows = [row for row in out["comparison"] if row["round"] == round_no]
        if len(runs) > 2 * len({r["dtype"] for r in runs}):
            lines += [f"Round {round_no + 1}:", ""]
        lines += [*table(rows, spread=False), ""]
    return "\n".join(lines)


def table(rows: list[dict], spread: bool) -> list[str]:
    extra = " refengine / vLLM spread |" if spread else ""
    lines = [
        "| dtype | c | prompt | refengine TTFT / TPOT P50 / TPOT mean ms | vLLM TTFT / TPOT P50 / TPOT mean ms "
        "| refengine tok/s (users' own) | vLLM tok/s (users' own) | throughput ratio (users' own) "
        "| TPOT P50 ratio | TPOT mean ratio |" + extra,
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if spread else ""),
    ]
    for row in rows:
        r, v = row["refengine"], row["vllm"]
        tail = (
            f"{_num(row['throughput_ratio'])} ({_num(row.get('cycle_ratio'))}) | {_num(row['tpot_ratio'])} | "
            f"{_num(row.get('tpot_mean_ratio'))}"
            if "throughput_ratio" in row
            else "not measured cleanly | " + (r["why_not"] or v["why_not"] or "no requests")[:80] + " | -"
        )
        if spread:
            tail += f" | {_num(r.get('cycle_spread'))} / {_num(v.get('cycle_spread'))}"
        lines.append(
            f"| {row['dtype']} | {r['concurrency']} | {r['input_len']} | {r['ttft_p50_ms']} / "
            f"{r['tpot_p50_ms']} / {r.get('tpot_mean_ms')} | {v['ttft_p50_ms']} / {v['tpot_p50_ms']} / "
            f"{v.get('tpot_mean_ms')} | {r['output_tok_s']} ({r.get('cycle_tok_s')}) | "
            f"{v['output_tok_s']} ({v.get('cycle_tok_s')}) | {tail} |"
        )
    return lines


def _num(x) -> str:
    return "—" if x is None else f"{x:.2f}"
