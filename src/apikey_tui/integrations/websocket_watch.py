"""A WebSocket's later messages, each let through only while the key that opened it passes."""

from __future__ import annotations

import time
from collections.abc import Collection

from apikey_tui.errors import AuthError
from apikey_tui.integrations.asgi_messages import POLICY_VIOLATION, Message, Receive, Scope, Send
from apikey_tui.integrations.guard import Guard
from apikey_tui.verifier import Caller

# RFC 6455 close code "try again later": the key could not be checked (503), which is not a
# refusal of the key.
TRY_AGAIN_LATER = 1013
# Where every check reads the database (revocation_bound=0, `Verifier.reads_every_check`), a
# connection reads its key at most this often: a message is not a request, so no limit bounds
# how many a client sends, and a flood of messages would be a flood of reads. Between two reads
# its messages pass on the last one. Elsewhere a message reads only after a commit, which one
# read (the change log's, shared by every connection and request) answers for all.
READ_EVERY_S = 0.1


class KeyWatch:
    """The receive and send of a WebSocket whose handshake a key passed.

    Each message either way first asks whether memory still vouches for the key
    (`Verifier.unchanged`, a fraction of a microsecond), else has the guard check it again
    (`Guard.recheck_async`). Once the key no longer passes (deleted, disabled, expired, its
    scopes or network rules changed), the connection is closed with 1008 (1013 when the key
    could not be checked): the app receives a disconnect, and a send raises OSError, which
    Starlette turns into WebSocketDisconnect. A connection where no message passes keeps its
    key until the next one. With revocation_bound=0, a connection reads its key at most every
    READ_EVERY_S.
    """

    def __init__(
        self, guard: Guard[Scope], scope: Scope, caller: Caller, required: Collection[str],
        route: str, receive: Receive, send: Send,
    ) -> None:  # fmt: skip
        self._guard, self._scope, self._caller = guard, scope, caller
        self._required, self._route = required, route
        self._receive, self._send = receive, send
        # The warm test of each message, without a coroutine: the handshake's header, read
        # once (a str keeps its hash, so the digest of it is not computed again).
        self._header = guard.authorization(scope)
        self._unchanged = guard.verifier.unchanged
        # With revocation_bound=0: when the key was last read (the handshake's check).
        self._spaced = guard.verifier.reads_every_check
        self._read_at = time.monotonic()
        self._closed = False  # the key stopped passing: every later message is refused
        self._code = POLICY_VIOLATION  # the close code once closed: 1013 if the key was unread
        # A close went out (the app's or ours) or the client left: a close of ours now would
        # be one too many, which uvicorn raises RuntimeError for, in the app.
        self._ended = False

    async def receive(self) -> Message:
        """The client's next message; a disconnect instead once the key no longer passes."""
        message = await self._receive()
        kind = message["type"]
        if kind == "websocket.receive":
            if not self._warm() and not await self._passes():
                return {"type": "websocket.disconnect", "code": self._code}
        elif kind == "websocket.disconnect":
            self._ended = True
        return message

    async def send(self, message: Message) -> None:
        """Send the app's message while the key passes; OSError once the connection is closed."""
        if self._closed:
            if message["type"] == "websocket.close":
                return  # closed already, by us
            raise OSError("the WebSocket was closed: its API key no longer passes")
        kind = message["type"]
        if kind == "websocket.send" and not self._warm() and not await self._passes():
            raise OSError("the WebSocket was closed: its API key no longer passes")
        if kind == "websocket.close":
            self._ended = True
        await self._send(message)

    def _warm(self) -> bool:
        """Whether the key passes from memory: open, and its key unchanged since it passed."""
        return not self._closed and self._unchanged(self._header, self._caller)

    async def _passes(self) -> bool:
        if self._closed:
            return False
        if self._spaced:
            now = time.monotonic()
            if now - self._read_at < READ_EVERY_S:
                return True  # read lately: see READ_EVERY_S
            self._read_at = now
        try:
            caller = await self._guard.recheck_async(
                self._scope, self._caller, self._required, self._route
            )
        except AuthError as error:
            # The app's receiving and sending tasks may both have been refused during one
            # recheck: only the first closes.
            if not self._closed:
                self._closed = True
                if error.status == 503:
                    self._code = TRY_AGAIN_LATER
                if not self._ended:
                    self._ended = True
                    await self._close(self._code)
            return False
        if caller is not self._caller:  # changed and still passing: the endpoint sees it now
            self._caller = caller
            state = self._scope.get("state")
            if state is not None:
                state["apikey"] = caller
        return True

    async def _close(self, code: int) -> None:
        try:
            await self._send({"type": "websocket.close", "code": code})
        except (OSError, RuntimeError):
            # The connection was closing already: the client left (OSError), or the server
            # answered the client's close frame while the key was being read (uvicorn's
            # RuntimeError for a close after a close). Either way it is closed; the app
            # learns it from this watch's disconnect or OSError, never from the server's error.
            pass
