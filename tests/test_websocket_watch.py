"""KeyWatch's own close against a server that, like uvicorn, refuses a second close."""

from __future__ import annotations

from typing import Any, cast

import anyio
import pytest

from apikey_tui.errors import InvalidKeyError, VerifierUnavailableError
from apikey_tui.integrations.asgi_messages import Message, Scope
from apikey_tui.integrations.guard import Guard
from apikey_tui.integrations.websocket_watch import KeyWatch
from apikey_tui.verifier import Caller

CALLER = Caller("alice", "both", "pk_test", frozenset({"serving"}))
TEXT: Message = {"type": "websocket.receive", "text": "hi"}
PUSH: Message = {"type": "websocket.send", "text": "pushed"}


class Revoked:
    """A guard whose key no longer passes: each recheck waits for `release`, then refuses."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.waiting = 0
        self.verifier = self  # whose key is never unchanged: every message is rechecked

    @staticmethod
    def authorization(request: Scope) -> str:
        return "ApiKey revoked"

    def unchanged(self, authorization: str | None, caller: Caller) -> bool:
        return False

    reads_every_check = False  # a message reads only after a commit

    async def recheck_async(
        self, request: Scope, caller: Caller, required: Any, route: str
    ) -> Caller:
        self.waiting += 1
        await self.release.wait()
        raise InvalidKeyError()


class Server:
    """The ASGI side as uvicorn plays it: after a close (the app's, or its own reply to the
    client's close frame) a close raises RuntimeError; once the client left, OSError."""

    def __init__(self, inbox: list[Message]) -> None:
        self.inbox = inbox
        self.sent: list[Message] = []
        self.close_sent = False
        self.gone = False

    async def receive(self) -> Message:
        return self.inbox.pop(0) if self.inbox else {"type": "websocket.disconnect", "code": 1000}

    async def send(self, message: Message) -> None:
        if self.gone:
            raise OSError("the client left")
        if self.close_sent:
            raise RuntimeError(f"Unexpected ASGI message {message['type']!r} after a close")
        if message["type"] == "websocket.close":
            self.close_sent = True
        self.sent.append(message)


def watch(guard: Revoked, server: Server) -> KeyWatch:
    """A KeyWatch over the stub guard and the fake server."""
    scope: Scope = {"type": "websocket", "state": {}}
    return KeyWatch(
        cast(Guard[Scope], guard), scope, CALLER, ("serving",), "/ws", server.receive, server.send
    )


async def test_a_receive_and_a_send_refused_at_once_close_the_connection_once() -> None:
    """The app's receiving and sending tasks both find the key revoked at the same moment:
    one close goes out, the receive gets a disconnect and the send an OSError, nothing else
    (a second close made uvicorn raise RuntimeError in the app: 'Exception in ASGI
    application')."""
    guard, server = Revoked(), Server([TEXT])
    keywatch = watch(guard, server)
    outcomes: dict[str, object] = {}

    async def receiving() -> None:
        outcomes["receive"] = await keywatch.receive()

    async def sending() -> None:
        try:
            await keywatch.send(PUSH)
        except Exception as error:
            outcomes["send"] = error

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(receiving)
        tasks.start_soon(sending)
        while guard.waiting < 2:
            await anyio.sleep(0)
        guard.release.set()
    assert outcomes["receive"] == {"type": "websocket.disconnect", "code": 1008}
    assert type(outcomes["send"]) is OSError
    assert server.sent == [{"type": "websocket.close", "code": 1008}]


@pytest.mark.parametrize("state", ["client closed first", "client gone", "app closed"])
async def test_a_refused_message_on_a_closing_connection_is_a_disconnect(state: str) -> None:
    """A message refused after the connection began closing by other means (the server
    answered the client's close frame, the client left, the app sent its close meanwhile)
    is a disconnect for the app, never the server's error about the watch's own close."""
    guard, server = Revoked(), Server([TEXT])
    keywatch = watch(guard, server)
    guard.release.set()
    if state == "client closed first":
        server.close_sent = True  # uvicorn's reply to the client's close frame
    elif state == "client gone":
        server.gone = True
    else:
        await keywatch.send({"type": "websocket.close", "code": 1000})
    assert await keywatch.receive() == {"type": "websocket.disconnect", "code": 1008}
    with pytest.raises(OSError):
        await keywatch.send(PUSH)
    assert [m for m in server.sent if m.get("code") == 1008] == []


class Unreachable(Revoked):
    """A guard whose database is down: the recheck is a 503, then the key is warm again."""

    def __init__(self) -> None:
        super().__init__()
        self.back = False
        self.release.set()

    def unchanged(self, authorization: str | None, caller: Caller) -> bool:
        return self.back

    async def recheck_async(
        self, request: Scope, caller: Caller, required: Any, route: str
    ) -> Caller:
        raise VerifierUnavailableError()


async def test_a_connection_closed_for_an_unreachable_database_stays_closed() -> None:
    """Closed with 1013 while the key could not be checked (the app's disconnect says 1013
    too, not 1008: the key was not refused), a connection lets no later message through,
    even once the database is back and the same key is warm again."""
    guard, server = Unreachable(), Server([TEXT, TEXT])
    keywatch = watch(guard, server)
    assert await keywatch.receive() == {"type": "websocket.disconnect", "code": 1013}
    guard.back = True
    assert await keywatch.receive() == {"type": "websocket.disconnect", "code": 1013}
    with pytest.raises(OSError):
        await keywatch.send(PUSH)
    assert server.sent == [{"type": "websocket.close", "code": 1013}]
