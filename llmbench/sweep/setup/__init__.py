"""From `llmbench sweep`'s options to a running sweep: validate everything, create (or resume) the
run directory, start the target, record its facts, run the levels.

Every check that can fail on user input runs before the run directory is created, so a typo
costs a one-line error and leaves nothing behind stuck at `running`.

args.py (SweepArgs, the options as typed), options.py (the options checked into the plan's parts),
new_run.py (a new run's plan and target), resume.py (--resume), prepare.py (the run directory for
the options), execute.py (the target started, the levels run), server_pids.py (a local target's
processes, for the probes).
"""
