"""The HTTP server of serve-auth and serve-leaks: uvicorn, closing idle and slow connections."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import h11
import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.supervisors import Multiprocess

from apikey_tui.integrations.asgi_messages import ASGIApp

if TYPE_CHECKING:
    from apikey_tui.integrations import HttpParser

try:  # the [serve] extra installs uvicorn[standard]; plain uvicorn has h11 only
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - exercised on installs without httptools
    HttpToolsProtocol = None  # type: ignore[assignment, misc]

WORKER_HEALTHCHECK_SECONDS = 30
# The h11 request states in which a request has not yet arrived whole (its head, then any body).
_ARRIVING = (h11.IDLE, h11.SEND_BODY)


class _ServeConfig(uvicorn.Config):
    """uvicorn's settings plus the header timeout: one object, pickled to each worker process."""

    def __init__(self, app: Any, *, header_timeout: float, **options: Any) -> None:
        super().__init__(app, **options)
        self.header_timeout = header_timeout


class _SlowClientTimers:
    """Idle and slow-client timers for one of uvicorn's HTTP protocols (mixed in before it).

    uvicorn arms its keep-alive timer only after a response and cancels it at the next byte: a
    connection that never sends a byte, or sends its request a byte at a time, stays open for
    ever (400 idle connections were still open after 13 s). Here a new connection is idle too
    (closed after `timeout_keep_alive`), and a request must arrive whole within
    `header_timeout` seconds of its first byte. The protocol says when a request is whole.
    """

    # Provided by uvicorn's protocol class.
    config: uvicorn.Config
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    timeout_keep_alive: int
    timeout_keep_alive_task: asyncio.TimerHandle | None
    timeout_keep_alive_handler: Callable[[], None]

    _arriving: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # type: ignore[misc]
        # Timed from the end of the first chunk of a request that did not arrive whole in it:
        # a request in one chunk (nearly all) costs no timer, set and cancelled.
        if self._request_whole():
            self._stop_arriving()
        elif self._arriving is None:
            timeout = getattr(self.config, "header_timeout", 10.0)
            self._arriving = self.loop.call_later(timeout, self._too_slow)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_arriving()
        super().connection_lost(exc)  # type: ignore[misc]

    def _request_whole(self) -> bool:
        """True once the client's current request has arrived whole (and no next one began)."""
        raise NotImplementedError

    def _stop_arriving(self) -> None:
        if self._arriving is not None:
            self._arriving.cancel()
            self._arriving = None

    def _too_slow(self) -> None:
        self._arriving = None
        if not self.transport.is_closing():
            self.transport.close()


class TimedH11Protocol(_SlowClientTimers, H11Protocol):
    """uvicorn's h11 protocol with the timers (pure Python: about 2.5x the CPU of httptools)."""

    def _request_whole(self) -> bool:
        return self.conn.their_state not in _ARRIVING


if HttpToolsProtocol is not None:

    class TimedHttpToolsProtocol(_SlowClientTimers, HttpToolsProtocol):
        """uvicorn's httptools protocol with the timers; the parser's callbacks say where the
        request is: begun at its first byte, whole at its end."""

        _in_message = False

        def _request_whole(self) -> bool:
            # Whole: the last request ended and is being answered. Between requests, bytes that
            # begin none (blank lines) keep the clock running, as h11's IDLE does.
            cycle = self.cycle
            return not self._in_message and cycle is not None and not cycle.response_complete

        def on_message_begin(self) -> None:
            self._in_message = True
            super().on_message_begin()

        def on_message_complete(self) -> None:
            self._in_message = False
            super().on_message_complete()

        def handle_websocket_upgrade(self) -> None:
            self._stop_arriving()  # the connection is no longer ours to time
            super().handle_websocket_upgrade()


def protocol(parser: HttpParser) -> type[asyncio.Protocol]:
    """The protocol class for `parser`: "auto" is httptools when installed, else h11."""
    if parser == "h11" or (parser == "auto" and HttpToolsProtocol is None):
        return TimedH11Protocol
    if HttpToolsProtocol is None:
        raise ValueError("--http httptools needs httptools: pip install 'uvicorn[standard]'")
    return TimedHttpToolsProtocol


def serve(
    app: ASGIApp | Callable[[], ASGIApp],
    *,
    host: str,
    port: int,
    keep_alive_timeout: int,
    header_timeout: int,
    http: HttpParser = "auto",
    workers: int = 1,
) -> None:
    """Run the app until interrupted; the lifespan closes what it holds.

    With `workers` above 1, `app` is a factory: uvicorn starts each worker as a new interpreter
    (spawned, never forked), and each builds its own app there, so no verifier, connection or
    thread is ever shared between processes.
    """
    config = _ServeConfig(
        app,
        header_timeout=float(header_timeout),
        factory=workers > 1,
        host=host,
        port=port,
        workers=workers,
        http=protocol(http),
        timeout_keep_alive=keep_alive_timeout,
        access_log=False,
        # No "server: uvicorn" on every answer: bytes and work per request, and a fingerprint.
        server_header=False,
        lifespan="on",
        # uvicorn would take the client's address from X-Forwarded-For when the peer is
        # 127.0.0.1 (its default); serve-leaks judges forwarded addresses itself
        # (--trusted-proxy), so the address an app sees is always the TCP peer's.
        proxy_headers=False,
        # uvicorn's supervisor kills a worker that misses its health ping for 5 s (default): on
        # a loaded host, or while a worker loads its key index, that killed healthy workers.
        timeout_worker_healthcheck=WORKER_HEALTHCHECK_SECONDS,
    )
    if workers > 1:
        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return
    server = uvicorn.Server(config)
    server.run()
    if not server.started:  # the port is taken, or the app failed to start: as uvicorn.run
        raise SystemExit(STARTUP_FAILURE)
