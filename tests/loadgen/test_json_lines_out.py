"""The locust process's JSON lines reach the parent whole even when the pipe is full and several
greenlets write at once. (A 64-record message of cut-off streams is larger than a pipe's buffer;
written without a lock, the progress line landed inside it, the parent could not parse the line and
the level's 64 cancelled records were lost.)"""

import json
import os
import subprocess
import sys
import textwrap
import time


def test_lines_written_by_concurrent_greenlets_into_a_full_pipe_stay_whole():
    child = textwrap.dedent("""
        import gevent, sys
        from loadgen.coordinator import JsonLinesOut
        out = JsonLinesOut(1)
        big = {"type": "records", "records": [{"itl": [0.001] * 2000, "i": i} for i in range(20)]}
        def progress():
            for n in range(200):
                out.write({"type": "progress", "sent": n})
                gevent.sleep(0.001)
        def records():
            for _ in range(5):
                out.write(big)
                gevent.sleep(0.001)
        gevent.joinall([gevent.spawn(progress), gevent.spawn(records)])
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, env=env)
    lines = []
    while True:  # a slow reader: the writer meets a full pipe again and again
        chunk = proc.stdout.read(4096)
        if not chunk:
            break
        lines.append(chunk)
        time.sleep(0.0005)
    assert proc.wait(30) == 0
    text = b"".join(lines).decode()
    parsed = [json.loads(line) for line in text.splitlines()]  # raises on an interleaved line
    assert sum(m["type"] == "records" for m in parsed) == 5
    assert sum(m["type"] == "progress" for m in parsed) == 200
