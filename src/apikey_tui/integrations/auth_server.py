"""The HTTP server of serve-auth and serve-leaks: uvicorn, closing idle and slow connections."""

from __future__ import annotations

import asyncio

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from apikey_tui.integrations.asgi_messages import ASGIApp

# The request's states in which it has not yet arrived whole (its head, then any body).
_ARRIVING = (h11.IDLE, h11.SEND_BODY)


class _TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, with an idle timer from the start and a deadline per request.

    uvicorn arms its keep-alive timer only after a response and cancels it at the next byte: a
    connection that never sends a byte, or sends its request a byte at a time, stays open for
    ever (400 idle connections were still open after 13 s). Here a new connection is idle too
    (closed after `timeout_keep_alive`), and a request must arrive whole within
    `header_timeout` seconds of its first byte.
    """

    header_timeout = 10.0
    _arriving: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def data_received(self, data: bytes) -> None:
        if self._arriving is None and self.conn.their_state is h11.IDLE:
            self._arriving = self.loop.call_later(self.header_timeout, self._too_slow)
        super().data_received(data)
        if self._arriving is not None and self.conn.their_state not in _ARRIVING:
            self._arriving.cancel()
            self._arriving = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._arriving is not None:
            self._arriving.cancel()
            self._arriving = None
        super().connection_lost(exc)

    def _too_slow(self) -> None:
        self._arriving = None
        if not self.transport.is_closing():
            self.transport.close()


def serve(
    app: ASGIApp, *, host: str, port: int, keep_alive_timeout: int, header_timeout: int
) -> None:
    """Run the app until interrupted; the lifespan closes its verifier."""

    class Protocol(_TimedH11Protocol):
        pass

    Protocol.header_timeout = float(header_timeout)
    # h11 whatever else is installed: the timers above are written for its protocol class.
    uvicorn.run(
        app,
        host=host,
        port=port,
        http=Protocol,
        timeout_keep_alive=keep_alive_timeout,
        access_log=False,
        lifespan="on",
        # uvicorn would take the client's address from X-Forwarded-For when the peer is
        # 127.0.0.1 (its default); serve-leaks judges forwarded addresses itself
        # (--trusted-proxy), so the address an app sees is always the TCP peer's.
        proxy_headers=False,
    )
