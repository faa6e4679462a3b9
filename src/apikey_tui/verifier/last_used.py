"""Last-used times, written off the request path in one batched UPDATE every few seconds."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from apikey_tui.clock import Clock

log = logging.getLogger("apikey_tui.verifier")

EPOCH = 60.0  # seconds at least between two epochs: a key's use is noted once per epoch
# Keys noted within this of a time are written with that time: one datetime for them all
# (a key's time is already that of its first use in an epoch, a minute or more).
SHARED_TIME = timedelta(seconds=1)


class LastUsedWriter:
    """Collects public ids that were used and writes them every `interval` seconds.

    A failed write (database down, a role that may not write) is logged once per failure streak
    and retried with the next batch; the thread never dies of it. Only keys that passed a check
    are noted, each once per epoch (and at each argon2 check), so what waits follows the number
    of keys, not the traffic: a list slot a note, 8 bytes, not a dict entry and a datetime
    (~100 bytes a key when a flush interval's keys are many).

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
        # The ids noted, in order, and where each time begins in them: (first index, time).
        self._ids: list[str] = []
        self._times: list[tuple[int, datetime]] = []
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

    @property
    def pending(self) -> dict[str, datetime]:
        """The keys noted and not written yet, with the time of each one's last note."""
        with self._lock:
            return _pending(self._ids, self._times)

    def note(self, public_id: str) -> None:
        """Remember that the key was used now; start the writer thread if needed."""
        with self._lock:
            now, times = self._clock(), self._times
            if not times or not timedelta(0) <= now - times[-1][1] < SHARED_TIME:
                times.append((len(self._ids), now))
            self._ids.append(public_id)
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
            ids, times = self._ids, self._times
            self._ids, self._times = [], []
        if not ids:
            return
        pending = _pending(ids, times)
        try:
            self._record(pending)
        except Exception as exc:  # never let the writer die; the next round retries
            if not self._failing:
                log.warning("cannot record when API keys were last used: %s", exc)
            self._failing = True
            with self._lock:  # keep them for the next round, newer times winning
                kept = {**pending, **_pending(self._ids, self._times)}
                self._ids, self._times = [], []
                for public_id, when in kept.items():  # each time once again, as noted
                    if not self._times or self._times[-1][1] is not when:
                        self._times.append((len(self._ids), when))
                    self._ids.append(public_id)
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


def _pending(ids: list[str], times: list[tuple[int, datetime]]) -> dict[str, datetime]:
    """Each noted id with the time of its last note (later notes win)."""
    pending: dict[str, datetime] = {}
    if not times:
        return pending
    ends = [start for start, _ in times[1:]] + [len(ids)]
    for (start, when), end in zip(times, ends, strict=True):
        pending.update(dict.fromkeys(ids[start:end], when))
    return pending
