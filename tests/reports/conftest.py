"""The reports' tests build their run directories with the analyzers' synthetic-run helper and the
triage's planted runs (a standing tail, for the terminal's widths)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "analyzers"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "triage"))
