"""One load level (run_level, in run.py), driven from the caller's (unpatched) process.

The load itself runs in locust processes (loadgen.locust_proc): one LocalRunner process when
workers == 1, else a master plus `workers` worker processes on this machine (loopback). Records
travel worker -> master over locust's messaging (runner.send_message / register_message), and
master -> here as JSON lines on the master's stdout, flushed as they finish; a reader thread
moves them onto a queue so that a slow on_records callback never blocks the load processes.

Bounds: the locust processes get 60 s to start; after that the level ends by the plan's hard
deadline (warmup + duration + request_timeout + 1 s; a sized level's bounds at first, as its plan
moves the ones published later) plus a grace of KILL_GRACE_S (loop.py), whatever the server does; then the
processes are killed. Ctrl-C stops the level the orderly way (in-flight
requests are recorded as cancelled) and is re-raised.

run.py (run_level), processes.py (the locust processes: started, stopped), loop.py (the parent's
loop: records, progress, deadlines, the level's result).
"""
