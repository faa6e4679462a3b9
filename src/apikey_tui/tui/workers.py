"""Every worker's one error boundary, and the one runner of store calls off the event loop.

Harlequin's habit: workers run with exit_on_error=False and simply raise; one handler of
Worker.StateChanged turns the error into one line. Textual sends that message to the node that
ran the worker, without bubbling, so each node that runs workers is a WorkerHost: the
boundary is written once here, and a host says only what a failure means to it (`work_failed`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from textual import on
from textual.message import Message
from textual.message_pump import MessagePump
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from apikey_tui.errors import (
    ApiKeyError,
    DuplicateKeyNameError,
    InvalidInputError,
    LifetimePolicyError,
)
from apikey_tui.tui.failures import unforeseen
from apikey_tui.tui.messages import StoreFailed
from apikey_tui.tui.session import Session

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import KeyStore

T = TypeVar("T")

# Worker groups: a host tells its workers apart by these when one fails.
STORE = "store"  # one store call asked for by the admin (StoreRunner)
LOAD = "load"  # a view's data
POLL = "poll"  # the change marker, every few seconds

# What the store refuses in a value the admin typed (an expiry past the lifetime policy, a name
# taken meanwhile): the dialog that asked comes back holding the text, saying why.
REFUSALS = (InvalidInputError, LifetimePolicyError, DuplicateKeyNameError)


@dataclass
class Failure:
    """A worker that raised: the error, and the one line to show for it."""

    worker: Worker[Any]
    error: BaseException = field(repr=False)
    _line: str | None = field(default=None, repr=False)

    @property
    def group(self) -> str:
        return self.worker.group

    def line(self) -> str:
        """A refusal's own text; anything else logged (once, no locals) and named by its type.

        Never the text of an unforeseen error: it was not written for the screen (and a store
        call's locals may hold a new secret).
        """
        if self._line is None:
            if isinstance(self.error, ApiKeyError):
                self._line = str(self.error)
            else:
                self._line = unforeseen(self.error, self.worker.description or "A task")
        return self._line


def failure_of(event: Worker.StateChanged) -> Failure | None:
    """The failure a worker's state change reports, if any: not a cancelled read, never."""
    worker = event.worker
    if event.state != WorkerState.ERROR or worker.is_cancelled:
        return None
    error = worker.error
    from apikey_tui.store import QueryCancelled  # SQLAlchemy's: not before the first rows

    if error is None or isinstance(error, QueryCancelled):
        return None
    return Failure(worker, error)


@dataclass
class StoreDone(Message):
    """A StoreRunner call returned: its host hands the result to the caller's done."""

    done: Callable[[Any], object]
    result: object = field(repr=False)  # e.g. a new key, with its one-time secret


class WorkerHost(MessagePump):
    """A node that runs workers (exit_on_error=False): their failures arrive in work_failed."""

    @on(StoreDone)
    def _store_done(self, message: StoreDone) -> None:
        message.stop()
        message.done(message.result)

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        failure = failure_of(event)
        if failure is not None:
            self.work_failed(failure)

    def work_failed(self, failure: Failure) -> None:
        """A worker of this node failed: by default, one line in a toast."""
        self.app.notify(failure.line(), title="Not done", severity="error", markup=False)


class StoreRunner:
    """Runs one store call at a time for a screen, off the event loop, with exit_on_error=False.

    The screen (a WorkerHost) hands the failures of the STORE group to `failed`. A call the
    database has not answered after `patience` seconds is said (one warning): a frozen server
    (or a frozen pooler) acknowledges TCP, so no socket bound ends the call, and the admin who
    pressed Delete would otherwise see nothing happen, for as long as it stays frozen.
    """

    patience = 5.0  # seconds a store call runs before the admin is told it is still waiting

    def __init__(self, screen: Screen[Any], session: Session) -> None:
        self.screen = screen
        self.session = session
        # The dialog to reopen, per running call, should the store refuse what was typed.
        self._again: WeakKeyDictionary[Worker[Any], Callable[[ApiKeyError], None]] = (
            WeakKeyDictionary()
        )

    def run(
        self,
        operation: Callable[[KeyStore], T],
        doing: str,
        done: Callable[[T], object],
        *,
        writes: bool = True,
        again: Callable[[ApiKeyError], None] | None = None,
    ) -> None:
        """Run operation on the store in a thread; done gets its result on the event loop.

        doing names the call in a failure's line ('Rotate (key …)'). A write ends the offer of
        undo (`Session.undoable`). again: on a refusal of what the admin typed (REFUSALS),
        reopen the dialog with the text instead of a toast.
        """
        if writes:
            self.session.undoable = None
        worker = self.screen.run_worker(
            partial(self._call, operation, done),
            group=STORE,
            description=doing,
            thread=True,
            exit_on_error=False,
        )
        if again is not None:
            self._again[worker] = again
        self.screen.set_timer(self.patience, partial(self._still_waiting, worker))

    def _still_waiting(self, worker: Worker[Any]) -> None:
        if worker.state in (WorkerState.PENDING, WorkerState.RUNNING):
            self.screen.app.notify(
                f"{worker.description}: the database has not answered for"
                f" {self.patience:.0f} s. Still waiting: it is done, or said, when it answers.",
                title="Waiting for the database",
                severity="warning",
                markup=False,
            )

    def _call(self, operation: Callable[[KeyStore], T], done: Callable[[T], object]) -> None:
        # As a message to the screen, in order with its others; a bug in done is the app's
        # (QuietCrashes.crashed), never reported as a failed store call.
        self.screen.post_message(StoreDone(done, operation(self.session.store)))

    def failed(self, failure: Failure) -> None:
        """A call of this runner failed: ask again, or say it (StoreFailed, to the screen)."""
        again = self._again.pop(failure.worker, None)
        if again is not None and isinstance(failure.error, REFUSALS):
            again(failure.error)
        else:
            self.screen.post_message(StoreFailed(failure.line()))
