"""A router that adds time of its own (tests/llmbench/diag/test_p99_router.py, bench/router_family.py):
a TCP proxy on a free loopback port that holds every byte a client sends for a fixed delay before passing it to one backend, as a router
that queues, opens a connection or retries before a replica sees the request would. What the backend
sends back passes at once, so the delay lands before the replica's TTFT clock starts and shows only
in the client's. Run on its own event loop in a thread of the calling process; `delay_proxy` is the
`with` block that starts and stops it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from urllib.parse import urlparse

from rundir.ports import free_port

CHUNK = 65536


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    """Bytes from reader to writer, each passed delay_s after it arrived (a delay line: a request that
    arrives in two reads is held delay_s once, not twice); the end of the stream is passed on too."""
    loop = asyncio.get_running_loop()
    line: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def take() -> None:
        data = b"-"
        try:
            while data:
                data = await reader.read(CHUNK)
                line.put_nowait((loop.time() + delay_s, data))
        finally:
            if data:  # a reset or a cancel: the other side is told the stream ended
                line.put_nowait((loop.time(), b""))

    async def give() -> None:
        while True:
            due, data = await line.get()
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    with contextlib.suppress(ConnectionError, OSError):
        await asyncio.gather(take(), give())


class DelayProxy:
    def __init__(self, backend_url: str, delay_s: float):
        u = urlparse(backend_url)
        self.backend = (u.hostname or "127.0.0.1", u.port or 80)
        self.delay_s = delay_s
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="delay-proxy")

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            backend_r, backend_w = await asyncio.open_connection(*self.backend)
        except OSError:
            client_w.close()
            return
        try:
            await asyncio.gather(_copy(client_r, backend_w, self.delay_s), _copy(backend_r, client_w, 0.0))
        finally:
            for w in (backend_w, client_w):
                w.close()

    def start(self) -> DelayProxy:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", self.port), self._loop
        )
        self._server = started.result(timeout=10)
        return self

    def stop(self) -> None:
        async def close() -> None:
            self._server.close()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


@contextlib.contextmanager
def delay_proxy(backend_url: str, delay_s: float):
    """The proxy's base URL for a `with` block; stopped at its end."""
    proxy = DelayProxy(backend_url, delay_s).start()
    try:
        yield proxy.url
    finally:
        proxy.stop()
