"""`llmbench export RUN... --parquet OUT [--csv OUT]`: every request of the runs in one table for
pandas or DuckDB (rundir.export; docs/run-format.md, "Exporting requests")."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from llmbench.cli_common import make_console, user_errors
from llmbench.report import run_dirs_of, run_errors

console = make_console()


def export(
    run_dirs: list[Path] = typer.Argument(
        ..., metavar="RUN_DIR...", help="Run directories (or folders of them, as `llmbench runs` lists)."
    ),
    parquet: Optional[Path] = typer.Option(
        None,
        help="Write the requests to this Parquet file (itl_s as a list "
        "column); read it with pandas.read_parquet or DuckDB.",
    ),
    csv: Optional[Path] = typer.Option(
        None, help="Write them to this CSV file too (without itl_s: a cell holds no list)."
    ),
) -> None:
    """Export every request record of the runs to one Parquet (and/or CSV) file: requests.jsonl's fields and the
    derived token counts, with run_id and the level's load in front."""
    from rundir.export import requests_of, write_csv, write_parquet

    if parquet is None and csv is None:
        raise typer.BadParameter("give --parquet FILE, --csv FILE or both")
    with user_errors(), run_errors():
        t0 = time.perf_counter()
        dirs = run_dirs_of(run_dirs)
        df = requests_of(dirs)
    for path, write in ((parquet, write_parquet), (csv, write_csv)):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write(df, path)
            console.print(
                f"wrote {path}: {len(df)} requests of {len(dirs)} run{'s' * (len(dirs) != 1)}, "
                f"{df.shape[1] - (path == csv)} columns",
                highlight=False,
            )
    console.print(f"in {time.perf_counter() - t0:.1f} s", highlight=False, style="dim")
