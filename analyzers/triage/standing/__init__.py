"""Standing tails explained: a slow level's latency split into queue, prefill and decode, the part
that dominates named with the cause behind it and the numbers (docs/diagnosis.md, "Standing tails").

check.py is the check (one finding per cause, its next step); cause.py tests the causes in order;
part_causes.py holds the causes of each dominant part; split.py splits a level's latency into its
parts; limits.py reads the engine's limits from the run's `--engine-arg` flags.
"""
