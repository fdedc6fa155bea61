"""A run's findings, grouped by kind across levels: each said once, with the levels it covers.

run.py holds the Finding, the severities and the run's own findings, and groups the levels' findings
by kind; each level's come from level_counts.py (its statistics: SLO bounds, errors, lengths, token
counts), level_notes.py (the notes the sweep and the analyzers wrote) and replicas.py (a fleet's
replicas), each through run.py's `add(kind, severity, opening, level, value)`.
"""
