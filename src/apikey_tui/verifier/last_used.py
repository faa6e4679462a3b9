"""Last-used times, written off the request path in one batched UPDATE every few seconds."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime

from apikey_tui.clock import Clock

log = logging.getLogger("apikey_tui.verifier")

EPOCH = 60.0  # seconds at least between two epochs: a key's use is noted once per epoch


class LastUsedWriter:
    """Collects public ids that were used and writes them every `interval` seconds.

    A failed write (database down, a role that may not write) is logged once per failure streak
    and retried with the next batch; the thread never dies of it. The pending set holds only
    keys that passed a check, so its size follows the number of keys, not the traffic.

    `epoch` is an object the thread replaces every `EPOCH` seconds or more: the verifier notes
    a key once per epoch (its cache entry keeps the epoch of its last note), so the request
    path reads no clock for it and a cached key carries no timestamp.
    """

    def __init__(
        self, record: Callable[[Mapping[str, datetime]], None], interval: float, clock: Clock
    ) -> None:
        self._record, self._interval, self._clock = record, interval, clock
        self._closed = threading.Event()
        self._failing = False
        self.reset()

    def reset(self) -> None:
        """Forget the writer thread and locks (after a fork they belong to the parent)."""
        self.pending: dict[str, datetime] = {}
        self.epoch = object()
        self._epoch_ends = time.monotonic() + EPOCH
        self._lock = threading.Lock()
        closed, self._closed = self._closed, threading.Event()  # its lock may be mid-use
        if closed.is_set():
            self._closed.set()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether the background writer thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def note(self, public_id: str) -> None:
        """Remember that the key was used now; start the writer thread if needed."""
        with self._lock:
            self.pending[public_id] = self._clock()
            if self._thread is None and not self._closed.is_set():
                self._thread = threading.Thread(
                    target=self._loop, name="apikey-tui-last-used", daemon=True
                )
                self._thread.start()

    def _loop(self) -> None:
        while not self._closed.wait(self._interval):
            now = time.monotonic()
            if now >= self._epoch_ends:
                self.epoch, self._epoch_ends = object(), now + EPOCH
            self.flush()

    def flush(self) -> None:
        """Write pending last-used times now."""
        with self._lock:
            pending, self.pending = self.pending, {}
        if not pending:
            return
        try:
            self._record(pending)
        except Exception as exc:  # never let the writer die; the next round retries
            if not self._failing:
                log.warning("cannot record when API keys were last used: %s", exc)
            self._failing = True
            with self._lock:  # keep them for the next round, newer times winning
                self.pending = {**pending, **self.pending}
            return
        if self._failing:
            log.warning("recording when API keys were last used works again")
        self._failing = False

    def close(self) -> None:
        """Stop the thread and write what is pending."""
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush()
