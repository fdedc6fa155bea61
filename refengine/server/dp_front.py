"""The data-parallel front: one OpenAI-compatible server in front of N replica servers.

It proxies /v1/completions and /v1/chat/completions to the replica the load balancer picks
(`dp_policy.py`), and names that replica in a response header (REPLICA_HEADER), so a client can
attribute each request. Bodies pass through as streams both ways: the request body is not read
here (the replica enforces its own limits) and a response's bytes are forwarded as they arrive
(`aiter_raw`), so SSE chunks, and the client's first-token times, are not delayed by the front.

A replica whose process has exited, whose /health fails, or that refuses a connection is not
picked until a health check finds it well again; a request that reaches no replica gets 503 in
OpenAI's error shape. A stream cut by a replica that dies mid-response ends with an error event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from refengine.server import dp_metrics
from refengine.server.dp_metrics import ReplicaPage
from refengine.server.dp_policy import REPLICA_HEADER, LoadBalancer
from refengine.server.dp_replicas import Replica
from refengine.server.metrics import CONTENT_TYPE

log = logging.getLogger(__name__)
HEALTH_INTERVAL_S = 1.0
# Hop-by-hop and framing headers: the front's own server sets these for its side of the connection.
_DROP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "date", "server", "content-length", "host"}


def _error(status: int, message: str, type_: str = "server_error") -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": type_, "param": None, "code": status}}, status_code=status
    )


def _sse_error(message: str) -> bytes:
    body = {"error": {"message": message, "type": "server_error", "param": None, "code": 503}}
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n".encode()


class _Lease:
    """One routed request's hold on its replica: its in-flight count and its upstream response,
    released once however the response ends (done, replica gone, client gone before or during it)."""

    def __init__(self, balancer: LoadBalancer, index: int, upstream: httpx.Response):
        self.balancer, self.index, self.upstream = balancer, index, upstream
        self.released = False

    async def release(self) -> None:
        if not self.released:
            self.released = True
            self.balancer.finished(self.index)
            await self.upstream.aclose()


class _RelayedResponse(StreamingResponse):
    """A StreamingResponse that releases its lease even when its body never started (a client gone
    before the response began never runs the body generator, whose own finally would release it)."""

    def __init__(self, lease: _Lease, content, status_code: int, headers: dict[str, str]):
        super().__init__(content, status_code=status_code, headers=headers)
        self.lease = lease

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.lease.release()


class DataParallelFront:
    def __init__(self, replicas: list[Replica], policy: str = "round-robin"):
        self.replicas = replicas
        self.balancer = LoadBalancer(len(replicas), policy)
        self.healthy = [True] * len(replicas)  # last health verdict per replica
        self.client: httpx.AsyncClient | None = None

    # ----- replica state ---------------------------------------------------------------------
    def eligible(self) -> frozenset[int]:
        return frozenset(r.index for r in self.replicas if r.alive() and self.healthy[r.index])

    async def _check(self, r: Replica) -> bool:
        if not r.alive():
            return False
        assert self.client is not None
        try:
            return (await self.client.get(r.url + "/health", timeout=2.0)).status_code == 200
        except httpx.HTTPError:
            return False

    async def refresh_health(self) -> list[bool]:
        verdicts = await asyncio.gather(*(self._check(r) for r in self.replicas))
        for r, ok in zip(self.replicas, verdicts):
            if self.healthy[r.index] and not ok:
                code = r.proc.poll() if r.proc is not None else None
                why = f"its process exited with {code}" if code is not None else "its /health failed"
                log.warning("replica %d (%s) is down: %s; routing around it", r.index, r.url, why)
            self.healthy[r.index] = ok
        return list(verdicts)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(HEALTH_INTERVAL_S)
            with contextlib.suppress(Exception):
                await self.refresh_health()

    # ----- routes ----------------------------------------------------------------------------
    async def generate(self, request: Request) -> Response:
        index = self.balancer.pick(self.eligible())
        if index is None:
            return _error(503, "no replica of this fleet is healthy; see its /health")
        replica = self.replicas[index]
        self.balancer.started(index)
        try:
            upstream = await self._send(request, replica)
        except httpx.HTTPError as exc:
            self.balancer.finished(index)
            self.healthy[index] = False
            return _error(
                503,
                f"replica {index} ({replica.url}) did not answer: {exc!r}; it is routed around "
                "until its /health answers again",
            )
        except BaseException:  # the client left while its body was being passed on
            self.balancer.finished(index)
            raise
        headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _DROP_HEADERS}
        headers[REPLICA_HEADER] = str(index)
        sse = upstream.headers.get("content-type", "").startswith("text/event-stream")
        lease = _Lease(self.balancer, index, upstream)
        return _RelayedResponse(lease, self._relay(lease, sse), status_code=upstream.status_code, headers=headers)

    async def _send(self, request: Request, replica: Replica) -> httpx.Response:
        assert self.client is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_HEADERS}
        upstream_request = self.client.build_request(
            request.method, replica.url + request.url.path, headers=headers, content=request.stream()
        )
        return await self.client.send(upstream_request, stream=True)

    async def _relay(self, lease: "_Lease", sse: bool):
        """The replica's bytes as they arrive; the lease ends with the last of them (so least-outstanding
        sees the replica free as soon as it is)."""
        try:
            async for chunk in lease.upstream.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            log.warning("replica %d broke a response mid-way: %r", lease.index, exc)
            if sse:
                yield _sse_error(f"replica {lease.index} ended the stream early ({exc!r}): it is down or restarting")
        finally:
            await lease.release()

    async def models(self, request: Request) -> Response:
        eligible = sorted(self.eligible())
        if not eligible:
            return _error(503, "no replica of this fleet is healthy; see its /health")
        assert self.client is not None
        replica = self.replicas[eligible[0]]
        try:
            headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP_HEADERS}
            resp = await self.client.get(replica.url + "/v1/models", headers=headers)
        except httpx.HTTPError as exc:
            return _error(503, f"replica {replica.index} did not answer /v1/models: {exc!r}")
        return Response(resp.content, status_code=resp.status_code, media_type=resp.headers.get("content-type"))

    async def health(self, request: Request) -> Response:
        verdicts = await self.refresh_health()
        if all(verdicts):
            return Response(status_code=200)
        down = [i for i, ok in enumerate(verdicts) if not ok]
        return JSONResponse(
            {
                "error": f"replicas {down} of {len(verdicts)} are not healthy; the others still serve",
                "replicas": [
                    {"engine": str(i), "url": r.url, "healthy": ok}
                    for i, (r, ok) in enumerate(zip(self.replicas, verdicts))
                ],
            },
            status_code=503,
        )

    async def metrics(self, request: Request) -> Response:
        pages = await asyncio.gather(*(self._scrape(r) for r in self.replicas))
        return Response(dp_metrics.render(self.balancer.loads, list(pages)), media_type=CONTENT_TYPE)

    async def _scrape(self, r: Replica) -> ReplicaPage:
        assert self.client is not None
        if r.alive():
            try:
                resp = await self.client.get(r.url + "/metrics", timeout=5.0)
                if resp.status_code == 200:
                    return ReplicaPage(r.index, resp.text, healthy=self.healthy[r.index])
            except httpx.HTTPError:
                pass
        return ReplicaPage(r.index, None, healthy=False)

    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(_app):
            # No read timeout: a long generation streams for as long as it takes; no pool limit:
            # the front must never queue a request the replicas could take.
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
            self.client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5.0), limits=limits)
            watcher = asyncio.create_task(self._watch())
            yield
            watcher.cancel()
            await self.client.aclose()

        routes = [
            Route("/v1/completions", self.generate, methods=["POST"]),
            Route("/v1/chat/completions", self.generate, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
        ]
        return Starlette(routes=routes, lifespan=lifespan)
