"""Test-wide options: `slow` tests run only with --runslow, `gpu` tests only where CUDA exists."""

import os

import pytest

# Generated tiny models go to a per-session cache so tests never touch the user's ~/.cache.
os.environ.setdefault("LLMBENCH_CACHE", os.path.join(os.path.dirname(__file__), "..", ".cache", "llmbench"))


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
