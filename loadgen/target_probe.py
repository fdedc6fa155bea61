"""Talking to a target outside a level: one request at a time, with the sweep's own bodies.

The preflight, the calibration of text prompts, the model lookup and the KV ramp share this
client, so a server is asked the same way everywhere (loadgen.openai_body builds every body).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx

from loadgen.specs import TargetSpec
from loadgen.sse import StreamResult, read_sse_stream

CONNECT_TIMEOUT_S = 10.0


class TargetError(RuntimeError):
    """The target cannot be measured as asked; the message is one line a user can act on."""


class TargetTimeout(TargetError):
    """The connection was made and the request sent, and the server did not answer in time: a slow
    request, not a server that is down (a caller may ask once more)."""


@dataclass
class Reply:
    """One answer: the HTTP status and the server's own error message, or the stream as read."""

    status: int
    message: str = ""  # the server's error text (its JSON "message"/"detail"), or ""
    stream: StreamResult | None = None
    json: dict = field(default_factory=dict)  # a non-streaming answer's body
    timed_out: bool = False  # accepted, and no answer (or no end of the stream) in time

    @property
    def ok(self) -> bool:
        return self.status == 200 and (self.stream is None or self.stream.ok)


def error_text(resp: httpx.Response) -> str:
    """The server's own words: OpenAI's {"error": {"message"}}, FastAPI's {"detail"}, or the body."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip()[:500]
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            for key in ("message", "detail", "msg"):
                if err.get(key):
                    v = err[key]
                    return (v if isinstance(v, str) else json.dumps(v))[:500]
        elif isinstance(err, str):
            return err[:500]
        if body.get("detail"):
            d = body["detail"]
            return (d if isinstance(d, str) else json.dumps(d))[:500]
    return json.dumps(body)[:500]


class TargetClient:
    def __init__(self, target: TargetSpec, timeout_s: float = 120.0):
        headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
        self.target = target
        self.http = httpx.Client(
            base_url=target.url, headers=headers, timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S)
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "TargetClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _fail_to_connect(self, exc: Exception) -> TargetError:
        """The transport error in words: no connection, no answer in time, or a connection that broke."""
        name = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            return TargetError(
                f"could not connect to {self.target.url} ({name}); is the server running and the URL right?"
            )
        if isinstance(exc, httpx.TimeoutException):
            return TargetTimeout(f"{self.target.url}: {self.no_answer_words(exc)}")
        return TargetError(f"{self.target.url}: the connection broke before the server answered ({name})")

    def no_answer_words(self, exc: Exception) -> str:
        """'the server accepted the request and did not answer within 120 s (ReadTimeout)'."""
        t = self.http.timeout
        limit = (
            t.write if isinstance(exc, httpx.WriteTimeout) else t.pool if isinstance(exc, httpx.PoolTimeout) else t.read
        )
        return (
            f"the server accepted the request and did not answer within {limit:g} s ({type(exc).__name__}); "
            "it is running but slow or stuck on this request"
        )

    def get_json(self, path: str) -> tuple[int, dict | str]:
        try:
            resp = self.http.get(path)
        except httpx.TransportError as exc:
            raise self._fail_to_connect(exc) from None
        if resp.status_code != 200:
            return resp.status_code, error_text(resp)
        try:
            return 200, resp.json()
        except ValueError:
            return 200, resp.text[:500]

    def post(self, path: str, body: dict) -> Reply:
        """A non-streaming request."""
        try:
            resp = self.http.post(path, json=body)
        except httpx.TransportError as exc:
            raise self._fail_to_connect(exc) from None
        if resp.status_code != 200:
            return Reply(resp.status_code, error_text(resp))
        try:
            data = resp.json()
        except ValueError:
            return Reply(resp.status_code, f"the answer is not JSON: {resp.text[:200]!r}")
        return Reply(200, json=data if isinstance(data, dict) else {})

    def stream(self, path: str, body: dict) -> Reply:
        """A streaming request, read with the sweep's own SSE reader."""
        try:
            with self.http.stream(
                "POST", path, json=body, headers={"Accept": "text/event-stream", "Accept-Encoding": "identity"}
            ) as resp:
                if resp.status_code != 200:
                    resp.read()
                    return Reply(resp.status_code, error_text(resp))
                lines = (line.encode() + b"\n" for line in resp.iter_lines())
                result = read_sse_stream(lambda: next(lines, b""), time.time)
                result.digest()
                return Reply(200, result.error or "", stream=result)
        except httpx.TransportError as exc:
            if isinstance(exc, httpx.ConnectError):
                raise self._fail_to_connect(exc) from None
            if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
                return Reply(0, self.no_answer_words(exc), timed_out=True)
            return Reply(0, f"{type(exc).__name__}: {exc}")

    def served_models(self) -> list[dict]:
        status, data = self.get_json("/v1/models")
        if status in (401, 403):
            raise TargetError(
                f"{self.target.url} refused the credentials (HTTP {status}: {data}); "
                "pass --api-key KEY or set OPENAI_API_KEY"
            )
        if status != 200 or not isinstance(data, dict):
            return []
        return [m for m in data.get("data") or [] if isinstance(m, dict) and m.get("id")]

    def resolve_model(self) -> str:
        """`--model` omitted: the one model the server lists, else a one-line error."""
        models = self.served_models()
        if len(models) == 1:
            return str(models[0]["id"])
        if not models:
            raise TargetError(f"{self.target.url}/v1/models lists no model; pass --model NAME")
        names = ", ".join(str(m["id"]) for m in models)
        raise TargetError(f"{self.target.url} serves several models ({names}); pass --model with one of them")

    def max_model_len(self) -> int | None:
        """vLLM and refengine list `max_model_len` per model in /v1/models."""
        for m in self.served_models():
            if m.get("id") == self.target.model and isinstance(m.get("max_model_len"), int):
                return int(m["max_model_len"])
        return None
