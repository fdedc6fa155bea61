"""llmbench: benchmark, profile and diagnose LLM inference deployments."""

__version__ = "0.1.0"
