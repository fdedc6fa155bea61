"""When a request stops after a new token: EOS or a stop token (once min_tokens is reached), or length."""

from __future__ import annotations

from refengine.request import Request, RequestStatus


def check_stop(request: Request, token: int, max_model_len: int) -> RequestStatus | None:
    """The finished status `token` (just appended) gives the request, or None to keep generating."""
    params = request.sampling_params
    if request.num_output_tokens >= params.min_tokens:
        if not params.ignore_eos and request.eos_token_id is not None and token == request.eos_token_id:
            return RequestStatus.FINISHED_STOPPED
        if token in (params.stop_token_ids or ()):  # a list after SamplingParams.__post_init__
            return RequestStatus.FINISHED_STOPPED
    if params.max_tokens is not None and request.num_output_tokens >= params.max_tokens:
        return RequestStatus.FINISHED_LENGTH
    if request.num_tokens >= max_model_len:
        return RequestStatus.FINISHED_LENGTH
    return None
