"""Output into a file or a pipe is never hard-wrapped: a log line grepped for a message matches it."""

import subprocess
import sys

from llmbench.cli_common import make_console


def test_a_long_message_stays_on_one_line_when_not_a_terminal(capsys):
    console = make_console()  # stdout is captured here: not a terminal
    words = "the server said: quota exhausted for this key, retry after the window resets " * 3
    console.print(f"[red]error:[/] {words}", highlight=False)
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and words.strip() in out


def test_a_commands_error_is_one_grep_able_line_in_a_pipe(tmp_path):
    missing = tmp_path / ("a-run-directory-with-a-name-long-enough-to-pass-eighty-columns-" * 2)
    proc = subprocess.run(
        [sys.executable, "-m", "llmbench.cli", "report", str(missing)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "80"},
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if str(missing) in line]
    assert lines and "error:" in lines[0], proc.stdout + proc.stderr
