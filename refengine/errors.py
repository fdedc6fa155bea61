"""The exception types that cross the engine's boundary.

`RefEngineError` is for mistakes a user can make; `RequestFailedError` and `StepFailedError`
say that a step failed inside the engine and which requests it takes down (only those).

Everything a user can get wrong (a bad engine argument, an unknown model path, a prompt
longer than `max_model_len`, a KV budget too small for one request) raises `RefEngineError`
with a message that says what to change. Callers (the CLI, the server) turn it into a clean
message or a 4xx; anything else that escapes is a bug in the engine.
"""


class RefEngineError(ValueError):
    """A user-facing configuration or input error; the message says what to change."""


class RequestFailedError(Exception):
    """One request failed inside the engine (e.g. its sampling), through no fault of the others.

    Deliberately not a RuntimeError (the distributed executor reads those as a dead rank) nor a
    RefEngineError (that is the caller's input): the engine finishes this one request with an
    error and goes on serving the rest."""

    def __init__(self, request_id: str, message: str):
        super().__init__(f"request {request_id}: {message}")
        self.request_id = request_id


class StepFailedError(Exception):
    """An engine step raised. `failed_ids` are the requests to finish with an error: the culprit
    when the step could name it (a RequestFailedError), else every request of the step. The
    others of the step lost nothing: their progress was not advanced, the next step redoes it."""

    def __init__(self, step_request_ids: list[str], culprit_ids: list[str], cause: BaseException):
        super().__init__(f"engine step failed: {cause!r}")
        self.step_request_ids = list(step_request_ids)
        self.culprit_ids = list(culprit_ids)
        self.cause = cause

    @property
    def attributed(self) -> bool:
        return bool(self.culprit_ids)

    @property
    def failed_ids(self) -> list[str]:
        return self.culprit_ids or self.step_request_ids
