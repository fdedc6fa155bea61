"""`DiagnosisError`: a mistake a user of `llmdiag` can make (unknown model, impossible plan, a log
that is not an OOM message). It is a `RefEngineError`, so `llmbench.cli_common.user_errors`
prints it as one line and exits 2 — the same path every other user mistake takes."""

from refengine.errors import RefEngineError


class DiagnosisError(RefEngineError):
    """A user-facing diagnosis error; the message says what to change."""
