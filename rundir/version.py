"""The tool's version: one place, imported by the face and written into every run.json."""

__version__ = "0.1.0"
