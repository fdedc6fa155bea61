"""The run-directory contract: the one thing load generator, probes, analyzers and reports share.

    runs/<run-id>/
      run.json          RunInfo: what ran, against what, with which spec, and its status
      requests.jsonl    one RequestRecord per line, appended and flushed as each request ends
      probes/<p>.jsonl  time series {"t": epoch_s, ...}
      summary.json      per-level statistics computed by the analyzers
      report.html       the shareable report

A leaf package: it imports nothing of ours, and everything else that touches a run directory
imports it (docs/run-format.md, docs/architecture.md).
"""

from rundir.errors import RunDirError
from rundir.records import ERROR_KINDS, REQUEST_STATUSES, RequestRecord
from rundir.run_dir import RunDir, json_default
from rundir.run_info import RUN_STATUSES, SCHEMA_VERSION, LevelMeta, RunInfo, SloSpec, SweepInfo, TargetInfo
from rundir.trace_replay import TraceReplay
from rundir.version import __version__
from rundir.workload_spec import WorkloadSpec

__all__ = [
    "ERROR_KINDS",
    "REQUEST_STATUSES",
    "RUN_STATUSES",
    "SCHEMA_VERSION",
    "LevelMeta",
    "RequestRecord",
    "RunDir",
    "RunDirError",
    "RunInfo",
    "SloSpec",
    "SweepInfo",
    "TargetInfo",
    "TraceReplay",
    "WorkloadSpec",
    "__version__",
    "json_default",
]
