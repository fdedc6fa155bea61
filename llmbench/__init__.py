"""llmbench: benchmark, profile and diagnose LLM inference deployments."""

from rundir.version import __version__

__all__ = ["__version__"]
