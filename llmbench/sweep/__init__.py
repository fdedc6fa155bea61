"""`llmbench sweep` and `llmbench worker`: options, the run directory, the target, the levels."""
