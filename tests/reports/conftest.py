"""The terminal's widths are checked on the triage's standing-tail run (test_standing_tails.two_levels)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "analyzers" / "triage"))
