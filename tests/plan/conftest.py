"""The planner's CLI tests build their run directories with the analyzers' synthetic-run helper."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "analyzers"))
