"""RunDir: the paths of one run directory, its writer (append-only while running) and its readers.

Writers append and flush, so a crash or Ctrl-C loses at most the request in flight. Readers
take only what they need and tolerate a torn last line (the run may still be going).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Iterator

from rundir import files
from rundir.atomic import atomic_write
from rundir.errors import RunDirError
from rundir.prediction import PredictionRecord
from rundir.records import RequestRecord
from rundir.run_info import RunInfo


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    # ----- paths ---------------------------------------------------------------------------
    @property
    def run_json(self) -> Path:
        return self.path / files.RUN_JSON

    @property
    def requests_jsonl(self) -> Path:
        return self.path / files.REQUESTS_JSONL

    @property
    def requests_interrupted_jsonl(self) -> Path:
        return self.path / files.REQUESTS_INTERRUPTED_JSONL

    @property
    def summary_json(self) -> Path:
        return self.path / files.SUMMARY_JSON

    @property
    def summary_csv(self) -> Path:
        return self.path / files.SUMMARY_CSV

    @property
    def report_html(self) -> Path:
        return self.path / files.REPORT_HTML

    @property
    def report_md(self) -> Path:
        return self.path / files.REPORT_MD

    @property
    def diagnosis_p99_json(self) -> Path:
        return self.path / files.DIAGNOSIS_P99_JSON

    @property
    def prediction_json(self) -> Path:
        return self.path / files.PREDICTION_JSON

    @property
    def probes_dir(self) -> Path:
        return self.path / files.PROBES_DIR

    def probe_file(self, name: str) -> Path:
        return self.probes_dir / f"{name}.jsonl"

    @property
    def probe_cost_json(self) -> Path:
        return self.probes_dir / files.PROBE_COST_JSON

    @property
    def table_cache(self) -> Path:
        return self.path / files.CACHE_DIR / files.TABLE_CACHE_NPZ

    # ----- writing -------------------------------------------------------------------------
    def create(self, info: RunInfo) -> None:
        self.path.mkdir(parents=True, exist_ok=False)
        self.probes_dir.mkdir()
        self.write_info(info)

    def write_info(self, info: RunInfo) -> None:
        atomic_write(self.run_json, json.dumps(info.to_dict(), indent=2))

    def append_records(self, records: list[RequestRecord]) -> None:
        with open(self.requests_jsonl, "a", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(dataclasses.asdict(r), separators=(",", ":")) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def set_aside_records(self, keep_levels: set[str]) -> int:
        """Move records of levels outside `keep_levels` to requests.interrupted.jsonl (on resume,
        a level that did not finish is run again; its first attempt is kept there). Returns how many."""
        if not self.requests_jsonl.exists():
            return 0
        keep: list[str] = []
        aside: list[str] = []
        with open(self.requests_jsonl, encoding="utf-8") as f:
            for line in f:
                try:
                    level = json.loads(line).get("level_id")
                except (json.JSONDecodeError, AttributeError):
                    continue  # a torn last line from the crash
                (keep if level in keep_levels else aside).append(line if line.endswith("\n") else line + "\n")
        if aside:
            with open(self.requests_interrupted_jsonl, "a", encoding="utf-8") as f:
                f.writelines(aside)
        atomic_write(self.requests_jsonl, "".join(keep))
        return len(aside)

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write(self.summary_json, json.dumps(summary, indent=2, default=json_default))

    def write_json(self, path: Path, obj: Any) -> None:
        """Any derived JSON file of the run (a diagnosis, the probes' cost), atomically; values JSON
        cannot hold (a path, an enum) are written as their text."""
        atomic_write(path, json.dumps(obj, indent=1, default=_json_or_text))

    def write_prediction(self, record: PredictionRecord) -> None:
        atomic_write(self.prediction_json, json.dumps(record.to_dict(), indent=1))

    # ----- reading -------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.run_json.is_file()

    def read_info(self) -> RunInfo:
        try:
            return RunInfo.from_dict(json.loads(self.run_json.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.path} is not a run directory (no run.json)") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RunDirError(f"{self.run_json}: not valid JSON ({exc})") from None
        except (ValueError, TypeError) as exc:
            raise RunDirError(f"{self.run_json}: {exc}") from None

    def iter_records(self) -> Iterator[RequestRecord]:
        if not self.requests_jsonl.exists():
            return
        with open(self.requests_jsonl, encoding="utf-8") as f:
            for line in f:
                try:
                    yield RequestRecord.from_dict(json.loads(line))
                except (json.JSONDecodeError, TypeError, ValueError):
                    continue  # a torn last line of a run that was killed mid-write

    def read_summary(self) -> dict[str, Any] | None:
        """summary.json, or None when there is none or it is not one (it is derived: recomputed anyway)."""
        if not self.summary_json.exists():
            return None
        try:
            data = json.loads(self.summary_json.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("levels", []), list):
            return None
        return data

    def read_prediction(self) -> PredictionRecord | None:
        """prediction.json, or None when there is none or it does not read (a record of another shape
        is no prediction, never a wrong one)."""
        if not self.prediction_json.exists():
            return None
        try:
            return PredictionRecord.from_dict(json.loads(self.prediction_json.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return None


def json_default(obj: Any) -> Any:
    """numpy scalars and dataclasses in summaries and diagnoses, as JSON."""
    if hasattr(obj, "item"):
        return obj.item()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def _json_or_text(obj: Any) -> Any:
    try:
        return json_default(obj)
    except TypeError:
        return str(obj)
