"""Turns the scheduler's new tokens into text, applies stop strings, builds RequestOutputs.

Stop strings live here, not in the scheduler, because they are about text: when one appears the
text is cut before it and the engine tells the scheduler to finish the request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from refengine.outputs import CompletionOutput, RequestOutput
from refengine.request import Request, RequestStatus
from refengine.tokenizer import IncrementalDetokenizer, Tokenizer, find_stop


@dataclass
class _RequestState:
    prompt: str | None
    detokenizer: IncrementalDetokenizer | None
    text: str = ""
    stop_reason: str | int | None = None
    stopped_by_string: bool = False
    token_ids: list[int] = field(default_factory=list)


class OutputProcessor:
    def __init__(self, tokenizer: Tokenizer | None):
        self.tokenizer = tokenizer
        self._states: dict[str, _RequestState] = {}

    def add_request(self, request_id: str, prompt: str | None, prompt_token_ids: list[int]) -> None:
        detok = IncrementalDetokenizer(self.tokenizer, prompt_token_ids) if self.tokenizer else None
        self._states[request_id] = _RequestState(prompt=prompt, detokenizer=detok)

    def drop(self, request_id: str) -> None:
        self._states.pop(request_id, None)

    def process(self, request: Request, new_token_ids: list[int]) -> tuple[RequestOutput, bool]:
        """Returns the output and whether a stop string ended the request in this call."""
        state = self._states[request.request_id]
        state.token_ids.extend(new_token_ids)
        new_text = ""
        hit_stop = False
        if state.detokenizer is not None and not state.stopped_by_string:
            delta = state.detokenizer.step(new_token_ids) if new_token_ids else ""
            if request.is_finished():
                delta += state.detokenizer.flush()  # emit a held-back partial character at the end
            before = len(state.text)
            candidate = state.text + delta
            stops = request.sampling_params.stop_strings
            cut = find_stop(candidate, stops, before) if stops and delta else None
            if cut is not None:
                state.stop_reason = next(s for s in stops if candidate.startswith(s, cut))
                candidate = candidate[:cut]
                state.stopped_by_string = hit_stop = True
            new_text = candidate[before:]
            state.text = candidate
        if request.status == RequestStatus.FINISHED_STOPPED and state.stop_reason is None and request.output_token_ids:
            last = request.output_token_ids[-1]
            state.stop_reason = None if last == request.eos_token_id else last
        finished = request.is_finished() or hit_stop
        reason = RequestStatus.FINISHED_STOPPED.finish_reason if hit_stop else request.status.finish_reason
        out = RequestOutput(
            request_id=request.request_id,
            prompt=state.prompt,
            prompt_token_ids=request.prompt_token_ids,
            outputs=[CompletionOutput(0, state.text, list(state.token_ids), reason, state.stop_reason)],
            finished=finished,
            new_token_ids=list(new_token_ids),
            new_text=new_text,
            num_cached_tokens=request.num_cached_tokens,
            num_preemptions=request.num_preemptions,
            timestamps=request.timestamps,
        )
        if finished:
            self.drop(request.request_id)
        return out, hit_stop
