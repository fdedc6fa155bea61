"""The Starlette app: OpenAI routes, SSE streaming, /health, /metrics.

Every request is validated here (API key, body size and time, JSON shape, fields, model name,
prompt length) before it reaches the engine, so bad input costs a 4xx and nothing else. Parsing,
chat templating and tokenizing run in a small thread pool, never on the event loop, so /health
and streaming answer while a 10 MB prompt is being read; the engine runs on its own thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from refengine.engine import LLMEngine
from refengine.errors import RefEngineError
from refengine.server import protocol, validation
from refengine.server.compute_thread import ComputeThread
from refengine.server.engine_loop import EngineDead, EngineLoop, EngineOverloaded, RequestFailed
from refengine.server.metrics import CONTENT_TYPE, ServerMetrics
from refengine.server.prompt_tokens import prompt_ids
from refengine.server.protocol import ApiError, GenerationRequest
from refengine.server.request_body import BodyLimits, parse_json, read_body

log = logging.getLogger(__name__)
_REASONS = {401: "auth", 408: "timeout", 413: "too_large"}


class Server:
    def __init__(
        self,
        engine: LLMEngine,
        served_model_name: str,
        api_key: str | None = None,
        max_waiting_requests: int = 1024,
        body_limits: BodyLimits | None = None,
        compute_thread: ComputeThread | None = None,
    ):
        self.engine = engine
        self.model_name = served_model_name
        self.api_key = api_key
        self.body_limits = body_limits or BodyLimits()
        self.created = int(time.time())
        self.loop = EngineLoop(engine, max_waiting_requests, thread=compute_thread)
        self.metrics = ServerMetrics(
            self.loop, served_model_name, engine.cache_config.block_size, engine.cache_config.num_blocks
        )
        self.loop.on_output = self.metrics.on_output
        self.loop.on_abort = self.metrics.aborted
        self.loop.on_failed = self.metrics.failed
        self.loop.on_step_failure = self.metrics.step_failed
        # Parsing and tokenizing: the tokenizer releases the GIL, so a few threads use a few cores.
        self._prep = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1), thread_name_prefix="refengine-prep")

    # ----- helpers -------------------------------------------------------------------------
    def _error(self, exc: ApiError, reason: str) -> JSONResponse:
        self.metrics.rejected(reason)
        # After a 408/413 the rest of the body may still be on its way: do not reuse the connection.
        headers = {"Connection": "close"} if exc.status in (408, 413) else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    def _check_auth(self, request: Request) -> None:
        if self.api_key is None:
            return
        header = request.headers.get("authorization", "")
        token = header[7:] if header.lower().startswith("bearer ") else ""
        if not hmac.compare_digest(token.encode(), self.api_key.encode()):
            raise ApiError(
                401,
                "invalid or missing API key: send 'Authorization: Bearer <key>'",
                type="authentication_error",
                code="invalid_api_key",
            )

    def _check_model(self, model: str | None) -> None:
        if model is not None and model != self.model_name:
            raise ApiError(
                404,
                f"the model '{model}' does not exist; this server serves '{self.model_name}'",
                type="not_found_error",
                param="model",
                code="model_not_found",
            )

    def _render_chat(self, messages: list[dict]) -> str:
        tok = self.engine.tokenizer
        if tok is None:
            raise ApiError(
                400, "this model has no tokenizer, so chat is unavailable; use /v1/completions with token ids"
            )
        if tok.chat_template:
            try:
                return tok.apply_chat_template(messages, add_generation_prompt=True)
            except Exception as exc:  # noqa: BLE001 - whatever the template raises, the messages are at fault: a 400
                raise ApiError(400, f"the chat template could not render these messages: {exc}") from None
        return protocol.plain_chat_prompt(messages)

    def _prepare(self, raw: bytes, chat: bool) -> tuple[GenerationRequest, list[int]]:
        """Body bytes → request and prompt ids, or ApiError. Runs in the prep pool, off the event loop."""
        body = parse_json(raw, self.body_limits.max_depth)
        req = validation.parse_chat(body, self._render_chat) if chat else validation.parse_completion(body)
        self._check_model(req.model)
        try:
            ids = prompt_ids(self.engine, req.prompt, req.chat)
        except RefEngineError as exc:
            raise ApiError(400, str(exc), param="messages" if req.chat else "prompt") from None
        return req, ids

    # ----- routes --------------------------------------------------------------------------
    async def completions(self, request: Request) -> Response:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self._generate(request, chat=True)

    async def _generate(self, request: Request, chat: bool) -> Response:
        try:
            self._check_auth(request)
            raw = await read_body(request, self.body_limits)
            req, ids = await asyncio.get_running_loop().run_in_executor(self._prep, self._prepare, raw, chat)
            request_id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
            outputs = self.loop.generate(ids, req.params, request_id, req.priority)
        except ApiError as exc:
            reason = "disconnected" if exc.code == "client_disconnected" else _REASONS.get(exc.status, "invalid")
            return self._error(exc, reason)
        except EngineOverloaded as exc:
            return self._error(ApiError(503, str(exc), type="overloaded_error"), "overloaded")
        except EngineDead as exc:
            return self._error(ApiError(503, str(exc), type="server_error"), "unhealthy")
        except Exception as exc:  # a bug of ours: say so in the API's shape, and log it
            log.exception("request preparation failed")
            return self._error(
                ApiError(500, f"internal error while preparing the request: {exc!r}", type="server_error"), "internal"
            )
        if req.stream:
            return StreamingResponse(
                self._sse(req, request_id, ids, outputs),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        return await self._complete(req, request_id, ids, outputs)

    async def _complete(self, req, request_id, ids, outputs) -> Response:
        final = None
        try:
            async for out in outputs:
                final = out
        except (EngineDead, RequestFailed) as exc:
            return JSONResponse(ApiError(500, str(exc), type="server_error").body(), status_code=500)
        except RefEngineError as exc:  # the engine refused it on arrival (the checks above should have)
            return self._error(ApiError(400, str(exc)), "invalid")
        assert final is not None, "the engine ends every request's stream with its final output"
        c = final.outputs[0]
        return JSONResponse(
            protocol.full_response(
                req, request_id, self.model_name, c.text, c.finish_reason, len(ids), len(c.token_ids)
            )
        )

    async def _sse(self, req, request_id, ids, outputs):
        first, n_out, created = True, 0, int(time.time())
        try:
            async for out in outputs:
                c = out.outputs[0]
                n_out = len(c.token_ids)
                reason = c.finish_reason if out.finished else None
                if out.new_token_ids or out.new_text or reason:
                    yield _sse(protocol.chunk(req, request_id, self.model_name, out.new_text, reason, first, created))
                    first = False
            if req.include_usage:
                yield _sse(protocol.usage_chunk(req, request_id, self.model_name, len(ids), n_out))
        except (EngineDead, RequestFailed) as exc:
            yield _sse(ApiError(500, str(exc), type="server_error").body())
        except RefEngineError as exc:
            self.metrics.rejected("invalid")
            yield _sse(ApiError(400, str(exc)).body())
        finally:
            with contextlib.suppress(Exception):
                await outputs.aclose()
        yield "data: [DONE]\n\n"

    async def models(self, request: Request) -> Response:
        try:
            self._check_auth(request)
        except ApiError as exc:
            return self._error(exc, "auth")
        card = {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "refengine",
            "root": str(self.engine.model_dir),
            "max_model_len": self.engine.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def health(self, request: Request) -> Response:
        if self.loop.healthy:
            return Response(status_code=200)
        return JSONResponse({"error": f"engine loop stopped: {self.loop.error!r}"}, status_code=503)

    async def metrics_endpoint(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=CONTENT_TYPE)

    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(_app):
            self.loop.start()
            yield
            self.loop.stop()
            self._prep.shutdown(wait=False, cancel_futures=True)

        routes = [
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics_endpoint, methods=["GET"]),
        ]
        return Starlette(routes=routes, lifespan=lifespan)


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"
