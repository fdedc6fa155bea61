"""A level's request lengths: the nominal ones its id names (where the workload varies them per
request) and the ones measured on its successful requests (mean, range, whether they vary)."""

from __future__ import annotations

import re

import numpy as np

_NOMINAL = re.compile(r"-in(\d+)-out(\d+)$")  # the sweep's level ids: c8-in512-out64, r2-in128-out64


def nominal_lengths(level_id: str, col: dict[str, np.ndarray], first_in: int, first_out: int) -> tuple[int, int]:
    """A level's prompt and output lengths as the sweep named them. Where the workload varies them per
    request (ShareGPT, mixed, a spread), the first record's targets say nothing about the level, so
    the level id's nominal lengths are used (levels of one sweep then stay in one scaling series);
    the measured lengths are in prompt_tokens_mean / output_tokens_mean."""
    m = _NOMINAL.search(level_id)
    vary = any(np.unique(v[~np.isnan(v)]).size > 1 for v in (col["target_input_len"], col["target_output_len"]))
    if m and vary:
        return int(m.group(1)), int(m.group(2))
    return first_in, first_out


def measured_lengths(col: dict[str, np.ndarray], ok: np.ndarray) -> dict:
    """Measured prompt and output lengths of the successful requests, and whether they vary."""
    out: dict = {}
    vary = False
    for name, measured, target in (
        ("prompt", "in_tokens", "target_input_len"),
        ("output", "out_tokens", "target_output_len"),
    ):
        v = col[measured][ok]
        v = v[~np.isnan(v) & (v > 0)]
        if v.size:
            out[f"{name}_tokens_mean"] = float(v.mean())
            out[f"{name}_tokens_range"] = [float(v.min()), float(v.max())]
            t = col[target][ok]
            vary |= bool(np.unique(t).size > 1 or abs(v.mean() - t[0]) > max(1.0, 0.02 * t[0]))
    out["lengths_vary"] = vary
    return out
