import pytest

from refengine import LLM


@pytest.fixture(scope="session")
def tiny_llm():
    """One tiny-test engine shared by the tests that only read from it."""
    return LLM(model="tiny-test", max_model_len=256, seed=0)
