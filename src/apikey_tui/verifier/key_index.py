"""The key index: every key's public id and fingerprint, packed, loaded off the request path."""

from __future__ import annotations

import enum
import hmac
import itertools
import logging
import threading
import time
from array import array
from collections.abc import Callable, Iterable

from apikey_tui.hashing import fingerprint

log = logging.getLogger("apikey_tui.verifier")

_ID = 2  # the public id's text after its "ak" prefix is what a record stores (16 bytes)
_ID_BYTES, _FP_BYTES = 16, 8
_RECORD = _ID_BYTES + _FP_BYTES
_LEGACY = bytes(_FP_BYTES)  # a key made before fingerprints (schema 1): only argon2 can tell
_GONE = b""  # the overlay's mark of an id no key holds any more
PAGE = 5000  # rows per read while loading: each page lets requests have the interpreter


class Verdict(enum.Enum):
    """What the key index says about a presented key, before any query or argon2."""

    UNKNOWN = "no key has this public id"
    WRONG = "the secret's fingerprint does not match"
    MATCH = "the fingerprint matches: almost surely the right secret"
    LEGACY = "a key made before fingerprints: only argon2 can tell"
    UNSURE = "the index cannot tell yet (loading, or behind the change log): look the id up"


def packed_fingerprint(stored: str | None) -> bytes:
    """The 8 bytes a record keeps of a stored fingerprint (16 hex digits), or the legacy mark."""
    return _LEGACY if stored is None else bytes.fromhex(stored)


class PackedIds:
    """An immutable map of public id -> fingerprint in about 24.3 bytes a key, RSS included.

    Records of 16 id bytes and 8 fingerprint bytes sit in one contiguous buffer, grouped into
    buckets chosen by the id's str hash (random per process, so nobody outside can aim at one
    bucket); `offsets[b]` is where bucket b starts. A lookup is one C-speed `find` over ~16
    records. One buffer, not a `bytes` per bucket: tens of thousands of small objects built
    while a million rows stream in left the allocator's heap fragmented, and the process paid
    71-74 bytes a key of RSS for 25 of records. A dict of str -> str cost ~350 bytes a key.
    """

    __slots__ = ("_count", "_data", "_mask", "_offsets")

    def __init__(self, data: bytes | bytearray, offsets: array[int], count: int) -> None:
        self._data, self._offsets, self._count = data, offsets, count
        self._mask = len(offsets) - 2  # offsets has one more entry than buckets (a power of 2)

    @classmethod
    def single(cls, records: bytes, count: int) -> PackedIds:
        """One bucket holding these records (tests: every id lands in it)."""
        return cls(records, array("Q", [0, len(records)]), count)

    def get(self, public_id: str) -> bytes | None:
        """The 8 fingerprint bytes of this id, or None when no record holds it."""
        bucket = hash(public_id) & self._mask
        offsets, data = self._offsets, self._data
        end = offsets[bucket + 1]
        needle = public_id[_ID:].encode()
        at = data.find(needle, offsets[bucket], end)
        while at != -1:
            if at % _RECORD == 0:  # a match across two records is no match
                return bytes(data[at + _ID_BYTES : at + _RECORD])
            at = data.find(needle, at + 1, end)
        return None

    def __len__(self) -> int:
        return self._count

    def nbytes(self) -> int:
        """The bytes the records and offsets take (what a key costs, measured by benchmarks)."""
        import sys

        return sys.getsizeof(self._data) + sys.getsizeof(self._offsets)


class PackedBuilder:
    """Collects records for about `expected` keys, then sorts them into PackedIds' buckets.

    Records arrive in one growing buffer (a large one grows in place, by mremap) beside each
    one's bucket number; `freeze` places them bucket by bucket into one exact-size buffer. At
    the peak that is ~52 bytes a key for a moment, all of it in a few large blocks that go back
    to the system when freed, never a heap of small ones.
    """

    def __init__(self, expected: int) -> None:
        size = 256
        while size * 16 < expected and size < 1 << 22:
            size *= 2
        self._mask = size - 1
        self._records = bytearray()
        self._buckets = array("I")
        self._count = 0

    def add(self, public_id: str, stored: str | None) -> None:
        """Add one key (its id must have the public id's shape; the parser guarantees it)."""
        self._buckets.append(hash(public_id) & self._mask)
        self._records += public_id[_ID:].encode()
        self._records += packed_fingerprint(stored)
        self._count += 1

    def freeze(self) -> PackedIds:
        """The records grouped by bucket (a counting sort), in one exact-size buffer."""
        buckets, records = self._buckets, self._records
        sizes = [0] * (self._mask + 2)
        for bucket in buckets:
            sizes[bucket + 1] += _RECORD
        offsets = array("Q", itertools.accumulate(sizes))
        data = bytearray(len(records))
        at = offsets.tolist()
        source = 0
        for bucket in buckets:
            place = at[bucket]
            data[place : place + _RECORD] = records[source : source + _RECORD]
            at[bucket] = place + _RECORD
            source += _RECORD
        self._records, self._buckets = bytearray(), array("I")  # freed now, not at the end
        return PackedIds(data, offsets, self._count)


Page = Callable[[int, int], tuple[int, list[tuple[str, str | None]]]]


def load(count: int, page: Page, *, stop: threading.Event, size: int = PAGE) -> PackedIds | None:
    """Read every key in pages (keyset on the row id) into packed records; None when stopped.

    Between pages the thread sleeps for 0 s, which hands the interpreter to a waiting request
    at once instead of after the 5 ms switch interval.
    """
    builder = PackedBuilder(count)
    after = 0
    while not stop.is_set():
        after, rows = page(after, size)
        for public_id, stored in rows:
            builder.add(public_id, stored)
        if len(rows) < size:
            return builder.freeze()
        time.sleep(0)
    return None


class KeyIndex:
    """Public id -> fingerprint of every key, so unknown ids and wrong secrets cost no query.

    A snapshot (`PackedIds`) is loaded in a background thread; the change log then keeps it
    exact: every change since the snapshot's log position lands in a small overlay (id ->
    (seq, fingerprint or gone)), read fresh from the database. Until a snapshot is loaded, and
    after the reader fell behind a pruned log, the index is untrusted: an id it cannot vouch
    for is UNSURE, and the verifier looks it up directly. A snapshot is loaded again in the
    background when the overlay grows past a fraction of it, so memory follows the keys.
    """

    def __init__(self, count: Callable[[], int], page: Page) -> None:
        self._count, self._page = count, page
        self.reset()

    def reset(self) -> None:
        """Empty and untrusted, with no loader (also after a fork: the loader was the parent's)."""
        self._base: PackedIds | None = None
        self._base_seq = 0
        self._overlay: dict[str, tuple[int, bytes]] = {}
        self._trusted = False
        self._loading: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.loads = 0  # snapshots loaded, for metrics and tests

    @property
    def trusted(self) -> bool:
        """Whether an id the index does not hold is surely unknown."""
        return self._trusted

    def judge(
        self, public_id: str, secret: str, presented: bytes | None = None
    ) -> tuple[Verdict, bytes | None]:
        """Judge a presented key by the index alone: the verdict, and the presented secret's
        fingerprint if it took one (else as given).

        A check judges a key twice when it reads the log in between, and compares the stored
        fingerprint once more after reading the key: it passes the fingerprint back in, so
        the keyed BLAKE2b runs once per check, and only for an id some key holds.
        """
        change = self._overlay.get(public_id)
        if change is not None:
            stored: bytes | None = change[1]
            fresh = True
        else:
            base = self._base
            stored = None if base is None else base.get(public_id)
            fresh = self._trusted
        if stored is None or stored == _GONE:
            return Verdict.UNKNOWN if fresh or stored == _GONE else Verdict.UNSURE, presented
        if stored == _LEGACY:
            return Verdict.LEGACY, presented
        if presented is None:
            presented = bytes.fromhex(fingerprint(public_id, secret))
        if hmac.compare_digest(stored, presented):
            return Verdict.MATCH, presented
        return Verdict.WRONG if fresh else Verdict.UNSURE, presented

    def apply(self, changes: Iterable[tuple[int, str, str | None, bool]]) -> None:
        """Record changes read from the log: (seq, public id, its fingerprint now, exists)."""
        # Under the loader's lock: a snapshot put in meanwhile replaces the overlay with its
        # filtered copy, and a change written into the old one was lost (a new key UNKNOWN).
        with self._lock:
            overlay = self._overlay
            for seq, public_id, stored, exists in changes:
                if public_id:
                    overlay[public_id] = (seq, packed_fingerprint(stored) if exists else _GONE)
        base = self._base
        if len(self._overlay) > max(4096, (len(base) if base is not None else 0) // 8):
            self._reload(self._last_seq())

    def forget(self, public_id: str) -> None:
        """A lookup found no key with this id (a previous secret whose grace ran out).

        Only an id the index holds is marked gone: a forged id looked up while the index loads
        must not buy an overlay entry (a flood would grow it by one per request).
        """
        with self._lock:  # as apply
            base = self._base
            if public_id in self._overlay or (base is not None and base.get(public_id) is not None):
                self._overlay[public_id] = (self._base_seq, _GONE)

    def _last_seq(self) -> int:
        return max((seq for seq, _ in self._overlay.values()), default=self._base_seq)

    def load_from(self, seq: int, *, distrust: bool = False) -> None:
        """Load a snapshot in the background; changes after `seq` reach it through apply().

        With `distrust` (the reader fell behind the log), nothing held now is vouched for until
        the new snapshot is in.
        """
        if distrust:
            with self._lock:  # as apply
                self._trusted = False
                self._overlay = {}
                # A load under way read pages before changes this reader never saw: stopped
                # (its snapshot is put in by nobody), and the keys are read again.
                self._stop.set()
                self._stop, self._loading = threading.Event(), None
        self._reload(seq)

    def _reload(self, seq: int) -> None:
        with self._lock:
            if self._loading is not None and self._loading.is_alive():
                return
            self._loading = threading.Thread(
                target=self._load, args=(seq, self._stop), name="apikey-tui-index", daemon=True
            )
            self._loading.start()

    def _load(self, seq: int, stop: threading.Event) -> None:
        try:
            snapshot = load(self._count(), self._page, stop=stop)
        except Exception as exc:  # the index is an optimisation: keep serving by lookups
            log.warning("The API key index could not be loaded (checks look keys up): %s", exc)
            return
        if snapshot is None:
            return
        with self._lock:
            if stop is not self._stop:
                return  # reset meanwhile (a fork): this snapshot belongs to nobody
            # Changes up to seq are in the snapshot; later ones stay in the overlay.
            self._overlay = {k: v for k, v in self._overlay.items() if v[0] > seq}
            self._base, self._base_seq, self._trusted = snapshot, seq, True
            self.loads += 1

    def wait_loaded(self, timeout: float) -> bool:
        """Wait for a loader under way (for tests and benchmarks); whether the index is trusted."""
        thread = self._loading
        if thread is not None:
            thread.join(timeout)
        return self._trusted

    def close(self) -> None:
        """Stop a loader under way (at its next page)."""
        self._stop.set()

    def nbytes(self) -> int:
        """The snapshot's size in bytes (the overlay is small by construction)."""
        return 0 if self._base is None else self._base.nbytes()

    def __len__(self) -> int:
        base = self._base
        count = len(base) if base else 0
        for public_id, (_, stored) in list(self._overlay.items()):
            held = base is not None and base.get(public_id) is not None
            count += (stored != _GONE) - held
        return count
