"""A request's work in seconds of a replica's time, for comparing what replicas were handed.

Counting tokens alike misjudges it: a prompt token is computed with the whole prompt in one prefill
step, an output token costs a decode step of its own, so on a CPU or a GPU an output token costs
tens of times a prompt token. A replica handed a tenth of its requests with 400 output tokens
instead of 32 carries twice the work, though its mean prompt + output tokens rose by 13%. Each
token is weighed at the run's own pace: prompt tokens at the prefill pace of its quick first tokens
(the fastest tenth of TTFT per prompt token: those that did not queue), output tokens at its median
TPOT. Without timings on record, tokens count alike.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

QUICK_TTFT_PERCENTILE = 10  # the first tokens that did not queue: the prefill's own pace


def work_seconds(df: pd.DataFrame, measured: np.ndarray) -> np.ndarray:
    """Per row, prompt and output tokens weighed by the run's prefill and decode paces (seconds)."""
    prompt = df["in_tokens"].to_numpy(float)
    output = df["out_tokens"].to_numpy(float)
    ttft = df["ttft_s"].to_numpy(float)
    tpot = df["tpot_s"].to_numpy(float)
    timed_prefill = measured & np.isfinite(ttft) & (prompt > 0)
    timed_decode = measured & np.isfinite(tpot) & (tpot > 0)
    if not timed_prefill.any() or not timed_decode.any():
        return prompt + output
    per_prompt_token = float(np.percentile(ttft[timed_prefill] / prompt[timed_prefill], QUICK_TTFT_PERCENTILE))
    per_output_token = float(np.median(tpot[timed_decode]))
    return prompt * per_prompt_token + output * per_output_token
