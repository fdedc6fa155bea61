"""ruff (configured in pyproject.toml) is clean on the whole tree and `ruff format` leaves it as it is, and mypy on the typed packages
(pyproject's [tool.mypy] files: rundir, refengine, playbooks, probes, loadgen, analyzers, reports,
llmbench)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]' installs it)")
    return path


def test_ruff_is_clean():
    r = subprocess.run([_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_tree_is_as_ruff_format_writes_it():
    """One formatter, so a diff shows what changed and not whose editor saved it: run `ruff format .`."""
    r = subprocess.run([_tool("ruff"), "format", "--check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, "run `ruff format .`:\n" + r.stdout + r.stderr


@pytest.mark.slow  # moved out of the default suite (its 10-minute budget); .ci/run runs it
def test_mypy_is_clean_on_the_typed_packages():
    r = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
