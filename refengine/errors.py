"""The one exception type for mistakes a user can make.

Everything a user can get wrong (a bad engine argument, an unknown model path, a prompt
longer than `max_model_len`, a KV budget too small for one request) raises `RefEngineError`
with a message that says what to change. Callers (the CLI, the server) turn it into a clean
message or a 4xx; anything else that escapes is a bug in the engine.
"""


class RefEngineError(ValueError):
    """A user-facing configuration or input error; the message says what to change."""
