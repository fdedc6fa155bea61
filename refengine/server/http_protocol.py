"""uvicorn's HTTP protocol with a deadline for request headers.

uvicorn times a connection out only after a response (`--timeout-keep-alive`), and forgets even
that once a byte arrives: a client that connects and sends nothing, or half its headers, holds
the connection (and its memory) forever. Here a connection must complete a request's headers
within `timeout_s` of connecting or of its previous response; otherwise it is closed, with a
408 first when part of a request had arrived. The body has its own deadline, in the app
(request_body.read_body), since only the app reads it.
"""

from __future__ import annotations

_408 = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s"
)


def header_timeout_protocol(timeout_s: float, base: type) -> type:
    """uvicorn's protocol class `base` (h11's or httptools', refengine/server/uvicorn_impl.py) with
    the header deadline."""
    message = (f"request headers did not arrive within {timeout_s:g} s (--timeout-request-header)\n").encode()

    # The base is chosen at run time, which mypy cannot take as a base class; at run time it is a class.
    class HeaderTimeoutProtocol(base):  # type: ignore[valid-type, misc]
        _header_timer = None
        _armed_cycle = None
        _partial = False

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm_header_timer()

        def data_received(self, data: bytes) -> None:
            self._partial = True
            super().data_received(data)

        def on_response_complete(self) -> None:
            # Armed before the base class, which may start a pipelined request (a new cycle) at once.
            self._arm_header_timer()
            super().on_response_complete()

        def connection_lost(self, exc) -> None:
            self._cancel_header_timer()
            super().connection_lost(exc)

        def _arm_header_timer(self) -> None:
            self._cancel_header_timer()
            self._armed_cycle = self.cycle  # a new request replaces self.cycle once its headers are in
            self._partial = False
            self._header_timer = self.loop.call_later(timeout_s, self._header_timeout)

        def _cancel_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _header_timeout(self) -> None:
            self._header_timer = None
            if self.cycle is not self._armed_cycle or self.transport.is_closing():
                return  # a request arrived in time
            if self._partial:
                self.transport.write(_408 % (len(message), message))
            self.transport.close()

    return HeaderTimeoutProtocol
