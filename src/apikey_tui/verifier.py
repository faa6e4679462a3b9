"""The service-facing verifier: check `Authorization: ApiKey <key>` and the scopes it grants."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import sqlite3
import sys
import threading
import time
import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from sqlalchemy import Engine

from apikey_tui.authorization import parse_key, split_credentials
from apikey_tui.db import ensure_schema, make_engine
from apikey_tui.errors import (
    InsufficientScopeError,
    InvalidKeyError,
    SchemaVersionError,
    StoreUnavailableError,
    VerifierUnavailableError,
)
from apikey_tui.hashing import SecretHasher
from apikey_tui.keyformat import ParsedKey
from apikey_tui.sqlite_watch import CommitWatch
from apikey_tui.store import Actor, Credential, KeyStore

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_REVOCATION_BOUND = 1.0  # seconds a PostgreSQL-backed cache entry is trusted unchecked
LAST_USED_INTERVAL = 60.0  # at most one last_used_at write per key per minute per process


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: the key's owner, name, public id and scopes."""

    owner: str
    key_name: str
    public_id: str
    scopes: frozenset[str]


@dataclass(slots=True)
class _Entry:
    """A key this process has verified: a salted digest of it, never the key itself.

    `hash_tag` fingerprints the stored argon2 hash, to notice a recreated key cheaply.
    """

    digest: bytes
    caller: Caller
    hash_tag: bytes
    generation: int
    checked_at: float
    recorded_at: float = float("-inf")


def _tag(secret_hash: str) -> bytes:
    return hashlib.blake2b(secret_hash.encode(), digest_size=16).digest()


class _FailureBudget:
    """A token bucket per public id: wrong secrets for one key buy only so much argon2 work."""

    def __init__(self, burst: float, per_second: float) -> None:
        self.burst, self.per_second = burst, per_second
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def _level(self, public_id: str, now: float) -> float:
        tokens, since = self._buckets.get(public_id, (self.burst, now))
        return min(self.burst, tokens + (now - since) * self.per_second)

    def allows(self, public_id: str) -> bool:
        with self._lock:
            return self._level(public_id, time.monotonic()) >= 1.0

    def spend(self, public_id: str) -> None:
        with self._lock:
            now = time.monotonic()
            self._buckets[public_id] = (self._level(public_id, now) - 1.0, now)


class Verifier:
    """Checks API keys against the admins' database; thread-safe, one per service process.

    Argon2 runs at most once per key per process: a verified key is remembered by a salted
    SHA-256 digest. Revocation reaches the cache through a generation: on SQLite it moves
    whenever a CommitWatch sees another connection commit; on PostgreSQL a cached entry is
    re-read from the database once it is older than `revocation_bound` seconds.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        realm: str = "api",
        hasher: SecretHasher | None = None,
        revocation_bound: float = DEFAULT_REVOCATION_BOUND,
        failure_burst: float = 5,
        failures_per_second: float = 1,
        argon2_concurrency: int = 2,
        flush_interval: float = 5.0,
    ) -> None:
        if revocation_bound < 0:
            raise ValueError("revocation_bound must be 0 (always ask) or more seconds")
        self.realm = realm
        self.store = KeyStore(engine, hasher=hasher, actor=Actor("verifier"))
        self.revocation_bound = revocation_bound
        self.flush_interval = flush_interval
        self._salt = secrets.token_bytes(32)
        self._entries: dict[bytes, _Entry] = {}
        self._by_id: dict[str, bytes] = {}
        self._scope_sets: dict[frozenset[str], frozenset[str]] = {}
        self._key_locks: dict[str, threading.Lock] = {}
        self._budget = _FailureBudget(failure_burst, failures_per_second)
        self._argon2 = threading.BoundedSemaphore(argon2_concurrency)
        self._generation = 0
        self._last_commit: object = None
        self._watch: CommitWatch | None = None
        self._watch_lock = threading.Lock()
        self._watch_path = engine.url.database if engine.dialect.name == "sqlite" else None
        if self._watch_path in ("", ":memory:"):
            self._watch_path = None  # one shared connection: nothing else can commit
        self._ready = False
        self._pending: dict[str, datetime] = {}
        self._pending_lock = threading.Lock()
        self._flusher: threading.Thread | None = None
        self._closed = threading.Event()
        # Pre-forking servers (gunicorn --preload) build the verifier before forking workers:
        # threads, SQLite handles and pooled connections must not cross a fork.
        after_fork = weakref.WeakMethod(self._after_fork)
        os.register_at_fork(after_in_child=lambda: (method := after_fork()) and method())

    def _after_fork(self) -> None:
        self._flusher = None
        self._watch, self._watch_lock = None, threading.Lock()
        self._pending_lock = threading.Lock()
        self._key_locks = {}  # a lock held by a thread that did not survive the fork stays held
        self.store.engine.dispose(close=False)

    @classmethod
    def from_url(cls, url: str, **options: object) -> Verifier:
        """Build a verifier on the database at url (no connection is made until the first check)."""
        return cls(make_engine(url, create=False), **options)  # type: ignore[arg-type]

    # --- the request path ---------------------------------------------------------------------

    def verify(self, authorization: str | None, required_scopes: Collection[str] = ()) -> Caller:
        """Return the caller, or raise an AuthError that knows its HTTP answer."""
        caller = self._warm(authorization)
        if caller is None:
            caller = self._cold(authorization)
        return self._authorize(caller, required_scopes)

    async def verify_async(
        self, authorization: str | None, required_scopes: Collection[str] = ()
    ) -> Caller:
        """Like verify; database and argon2 work runs in a thread so the event loop never waits."""
        caller = self._warm(authorization)
        if caller is None:
            caller = await asyncio.to_thread(self._cold, authorization)
        return self._authorize(caller, required_scopes)

    def _authorize(self, caller: Caller, required: Collection[str]) -> Caller:
        if required and not caller.scopes.issuperset(required):
            raise InsufficientScopeError(sorted(set(required) - caller.scopes))
        return caller

    def _digest(self, credential: str) -> bytes:
        return hashlib.sha256(self._salt + credential.encode()).digest()

    def _warm(self, authorization: str | None) -> Caller | None:
        """The cached path: one split, one SHA-256, one dict lookup, one freshness test."""
        if authorization is None:
            return None
        scheme, _, credential = authorization.strip(" \t").partition(" ")
        if scheme != "ApiKey" and scheme.lower() != "apikey":
            return None
        entry = self._entries.get(self._digest(credential.strip(" ")))
        if entry is None:
            return None
        if self._watch_path is not None:
            if entry.generation != self._current_generation():
                return None
            now = time.monotonic()
        else:
            now = time.monotonic()
            if now - entry.checked_at >= self.revocation_bound:
                return None
        if now - entry.recorded_at >= LAST_USED_INTERVAL:
            self._note_use(entry, now)
        return entry.caller

    def _current_generation(self) -> int:
        """Bump the generation when another connection committed to the SQLite file."""
        watch = self._watch
        if watch is None:
            with self._watch_lock:
                try:
                    watch = self._watch = self._watch or CommitWatch(self._watch_path or "")
                except sqlite3.Error:
                    raise VerifierUnavailableError() from None
        try:
            token = watch.token()
        except sqlite3.Error:
            raise VerifierUnavailableError() from None
        if token != self._last_commit:
            self._last_commit = token
            self._generation += 1
        return self._generation

    def _cold(self, authorization: str | None) -> Caller:
        """Parse, look the key up, and run argon2 only when this exact key was never verified."""
        credential = split_credentials(authorization)
        parsed = parse_key(credential)
        digest = self._digest(credential)
        if digest not in self._entries and not self._budget.allows(parsed.public_id):
            # A flood of wrong secrets for this id: refuse before the database and argon2.
            raise InvalidKeyError()
        # One thread per key at a time: twenty requests arriving together with a new key cost
        # one argon2 run, and the others find the entry it left.
        with self._key_locks.setdefault(parsed.public_id, threading.Lock()):
            caller = self._warm(authorization)
            if caller is not None:
                return caller
            return self._check_and_remember(parsed, digest, self._entries.get(digest))

    def _check_and_remember(self, parsed: ParsedKey, digest: bytes, entry: _Entry | None) -> Caller:
        # Snapshot freshness before reading: a change committed during the read shows next time.
        generation = self._current_generation() if self._watch_path else self._generation
        checked_at = time.monotonic()
        stored = self._call_store(lambda: self.store.credential(parsed.public_id))
        if stored is None:
            self._forget(parsed.public_id)
            raise InvalidKeyError()
        if entry is not None and entry.hash_tag == _tag(stored.secret_hash):
            # Known key, cache entry merely stale: the database still holds the same hash.
            entry.caller = self._caller(stored)
            entry.generation, entry.checked_at = generation, checked_at
            return entry.caller
        secret_hash = self._check_secret(parsed.public_id, parsed.secret, stored)
        self._forget(parsed.public_id)
        entry = _Entry(digest, self._caller(stored), _tag(secret_hash), generation, checked_at)
        self._entries[digest] = entry
        self._by_id[parsed.public_id] = digest
        self._note_use(entry, checked_at)
        return entry.caller

    def _check_secret(self, public_id: str, secret: str, stored: Credential) -> str:
        """Run argon2 within the failure budget; upgrade an old hash; return the hash now stored."""
        if not self._budget.allows(public_id):
            raise InvalidKeyError()
        with self._argon2:
            ok = self.store.hasher.verify(stored.secret_hash, secret)
        if not ok:
            self._budget.spend(public_id)
            raise InvalidKeyError()
        if not self.store.hasher.needs_rehash(stored.secret_hash):
            return stored.secret_hash
        upgraded = self.store.hasher.hash(secret)
        try:
            self.store.replace_hash(public_id, stored.secret_hash, upgraded)
        except StoreUnavailableError:
            return stored.secret_hash  # the upgrade waits for the next successful check
        return upgraded

    def _forget(self, public_id: str) -> None:
        digest = self._by_id.pop(public_id, None)
        if digest is not None:
            self._entries.pop(digest, None)

    def _caller(self, stored: Credential) -> Caller:
        info = stored.info
        scopes = frozenset(info.scopes)
        # Many keys share a few scope sets and owners: one object each saves ~250 bytes a key.
        scopes = self._scope_sets.setdefault(scopes, scopes)
        return Caller(sys.intern(info.owner), info.name, info.public_id, scopes)

    def _call_store(self, operation: Callable[[], T]) -> T:
        try:
            if not self._ready:
                ensure_schema(self.store.engine, create=False)
                self._ready = True
            return operation()
        except (StoreUnavailableError, SchemaVersionError) as exc:
            log.warning("API keys cannot be checked: %s", exc)
            raise VerifierUnavailableError() from None

    # --- last used, off the request path ------------------------------------------------------

    def _note_use(self, entry: _Entry, now: float) -> None:
        entry.recorded_at = now
        with self._pending_lock:
            self._pending[entry.caller.public_id] = datetime.now(UTC)
            if self._flusher is None and not self._closed.is_set():
                self._flusher = threading.Thread(
                    target=self._flush_loop, name="apikey-tui-last-used", daemon=True
                )
                self._flusher.start()

    def _flush_loop(self) -> None:
        while not self._closed.wait(self.flush_interval):
            self.flush()

    def flush(self) -> None:
        """Write pending last-used times now (also done every flush_interval seconds)."""
        with self._pending_lock:
            pending, self._pending = self._pending, {}
        try:
            self.store.record_use(pending)
        except StoreUnavailableError:
            with self._pending_lock:  # keep them for the next round, newer times winning
                self._pending = {**pending, **self._pending}

    def close(self) -> None:
        """Flush last-used times, stop the background writer and release connections."""
        self._closed.set()
        if self._flusher is not None:
            self._flusher.join(timeout=5)
        self.flush()
        with self._watch_lock:
            if self._watch is not None:
                self._watch.close()
                self._watch = None
        self.store.close()

    def cache_size(self) -> int:
        """How many verified keys this process remembers (by digest)."""
        return len(self._entries)
