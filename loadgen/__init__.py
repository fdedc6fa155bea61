"""The load generator: workloads, the locust streaming users, open and closed loop, sweep levels.

Importing this package never imports locust (which monkey-patches a process with gevent): the
load runs in locust processes of its own (loadgen.locust_proc), started by run_level.
"""

from loadgen.errors import LoadGeneratorError
from loadgen.level.run import run_level
from loadgen.specs import LevelProgress, LevelResult, LevelSpec, TargetSpec
from loadgen.workloads import (
    RequestSpec,
    Workload,
    WorkloadError,
    WorkloadOptions,
    level_workload_factory,
    make_workload,
)

__all__ = [
    "LevelProgress",
    "LevelResult",
    "LevelSpec",
    "LoadGeneratorError",
    "RequestSpec",
    "TargetSpec",
    "Workload",
    "WorkloadError",
    "WorkloadOptions",
    "level_workload_factory",
    "make_workload",
    "run_level",
]
