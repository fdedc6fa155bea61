"""The options that choose and shape the workload, declared once for `llmbench sweep` and
`llmbench capacity`: the same flag means the same thing, with the same help. (The lengths are not
here: a sweep takes lists of them, a capacity search one of each.)"""

from __future__ import annotations

import typer

INPUT_LEN_SPREAD = typer.Option(0.0, help="Prompt lengths drawn uniformly within ±this fraction.")
WORKLOAD = typer.Option(
    "random",
    help="random | sharegpt | shared-prefix | mixed | trace (a production trace's "
    "requests at its times) | sessions (multi-turn chats).",
)
LONG_LEN = typer.Option(
    4096, min=1, help="--workload mixed: prompt length of the long requests (the short ones use --input-len)."
)
LONG_FRACTION = typer.Option(0.1, min=0.0, max=1.0, help="--workload mixed: share of long requests.")
DATASET = typer.Option(
    None,
    help="ShareGPT JSON/JSONL file for --workload sharegpt; the trace (Mooncake .jsonl or "
    "Azure .csv) for --workload trace.",
)
TRACE_LIMIT = typer.Option(None, min=1, help="--workload trace: replay only the first N requests.")
BLOCK_SIZE = typer.Option(512, min=1, help="--workload trace: prompt tokens per hash id (Mooncake: 512).")
TURNS = typer.Option(4, min=1, help="--workload sessions: turns per conversation.")
