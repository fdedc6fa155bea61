"""Test-wide options: `slow` tests run only with --runslow, `gpu` tests only where CUDA exists."""

import os
import signal

import pytest

# Each test sets the width it renders at (CliRunner's env, a subprocess's COLUMNS). rich reads COLUMNS
# once, when a Console is made, so a width exported by the shell that started pytest would freeze
# every module-level console at it on import and override what the test asked for.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

from slot_server_proc import slot_server  # noqa: E402, F401  (the fixture, for every folder)

# Generated tiny models go to a per-session cache so tests never touch the user's ~/.cache.
os.environ.setdefault("LLMBENCH_CACHE", os.path.join(os.path.dirname(__file__), "..", ".cache", "llmbench"))


@pytest.fixture(scope="session", autouse=True)
def sigint_as_in_a_terminal():
    """Ctrl-C behaves as it does in a terminal, however pytest was started. A process started in the
    background by a shell without job control (`cmd &` in a script, nohup, some CI runners) inherits
    SIGINT ignored, and Python then installs no KeyboardInterrupt handler: the tests that press
    Ctrl-C (on themselves, or on an `llmbench sweep` they started, which inherits the disposition)
    would see nothing happen. The suite restores the terminal's behaviour for itself and its
    children, and puts back what it found at the end."""
    found = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, found)


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    import torch

    has_gpu = torch.cuda.is_available()
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    skip_gpu = pytest.mark.skip(reason="gpu: no CUDA device visible")
    for item in items:
        if "slow" in item.keywords and not config.getoption("--runslow"):
            item.add_marker(skip_slow)
        if "gpu" in item.keywords and not has_gpu:
            item.add_marker(skip_gpu)
