"""The Verifier: one check of an API key, warm from memory or cold from the database."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import sys
import threading
import time
import weakref
from collections.abc import Callable, Collection, Generator, Hashable, Iterable, Mapping
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import Engine, event

from apikey_tui import forksafety, keyformat
from apikey_tui.clock import Clock, system_clock
from apikey_tui.db import VERIFIER_APPLICATION, ensure_schema, make_engine
from apikey_tui.db.engine import LOCK_WAIT, NO_LOCK_WAIT_S
from apikey_tui.errors import (
    AuthError,
    InsufficientScopeError,
    InvalidKeyError,
    LimitsUnavailableError,
    NetworkNotAllowedError,
    RateLimitedError,
    SchemaVersionError,
    StoreUnavailableError,
    VerifierUnavailableError,
)
from apikey_tui.hashing import SecretHasher, fingerprint
from apikey_tui.keyformat import ParsedKey
from apikey_tui.limits import ADMITTED, LEASE_DEFAULT, FailMode
from apikey_tui.limits.where import KEY_DATABASE
from apikey_tui.store.credentials import Change, Credential, credential_source
from apikey_tui.verifier.authorization import parse_key, split_credentials
from apikey_tui.verifier.caller import Caller, Terms
from apikey_tui.verifier.changes import ChangeFeed
from apikey_tui.verifier.freshness import (
    BoundFreshness,
    CommitFreshness,
    PushFreshness,
    freshness_for,
)
from apikey_tui.verifier.gate import CheckGate, Done, FailureBudget, OutageLog, Run, TokenBucket
from apikey_tui.verifier.key_index import KeyIndex, Verdict
from apikey_tui.verifier.last_used import LastUsedWriter
from apikey_tui.verifier.metrics import VerifierStats
from apikey_tui.verifier.port import CredentialSource
from apikey_tui.verifier.restrictions import (
    REFUSE,
    WOULD_REFUSE,
    Restrictions,
    applied_limits,
    placement,
    refusal,
)
from apikey_tui.verifier.use_counts import DEFAULT_LIMIT, HASHABLE, UseCounts

__all__ = ["Caller", "Verifier"]

log = logging.getLogger("apikey_tui.verifier")
T = TypeVar("T")

DEFAULT_REVOCATION_BOUND = 1.0  # seconds a PostgreSQL-backed cache entry is trusted unchecked
DEFAULT_CHECK_TIMEOUT = 2.0  # seconds a request waits for the database before 503
RECHECK_BURST, RECHECKS_PER_SECOND = 3, 1.0  # log re-reads for ids unknown where push may lag
VERIFIER_LOCK_WAIT_S = 0.2  # the most a verifier's one-key write waits for a lock: see __init__
KEY_WRITE_BACKOFF_S = 1.0  # seconds no one-key write waits after one gave up (`_key_write`)
MAX_USAGE_INTERVAL = 10.0  # seconds usage counts may wait in memory at most
_USUAL = "ApiKey "  # the header's usual spelling: the warm path looks only this one up
# Where "ApiKey <key>" holds the key's public id (the warm path's cache lookup).
_HEADER_ID = slice(len(_USUAL), len(_USUAL) + keyformat.ID_LENGTH)
_SYNC = object()  # the CheckGate key of a change-log read: one at a time, shared


_SALTED = hashlib.blake2b(secrets.token_bytes(32), digest_size=8)  # salted once a process


def _salted_digest(header: str) -> int:
    """BLAKE2b-64 of a per-process salt and the header: the digest where `hash` is not a
    64-bit SipHash (a 32-bit build, another algorithm compiled in)."""
    salted = _SALTED.copy()
    salted.update(header.encode())
    return int.from_bytes(salted.digest())


# The digest a verified key is remembered with: of its whole header in the usual spelling,
# "ApiKey <key>", its low 60 bits (`_DIGEST_BITS`). Python's own hash of a str is SipHash-1-3
# under a 128-bit key drawn at interpreter start (derived from PYTHONHASHSEED when that is set):
# computed in C in about a tenth of a salted BLAKE2b's time (0.07 against 0.57 us with the
# encode, copy and update it needs). 60 bits, since an int under 2**60 is the allocator's 32
# bytes where 64 bits take 48 (issue 31: a cached key under 300 bytes). 60 bits are enough: an
# entry is only ever compared with headers that name its id, its value is never shown, and it
# hashes a 260-bit secret the forger lacks, so a forger guesses blindly, a request a try, 2**59
# on average. Where `hash` is anything else, a salted BLAKE2b-64, masked the same.
_KEYED_HASH = sys.hash_info.width >= 64 and sys.hash_info.algorithm.startswith("siphash")
header_digest: Callable[[str], int] = hash if _KEYED_HASH else _salted_digest
_DIGEST_BITS = (1 << 60) - 1


class _Entry(Caller):
    """A key this process has verified, remembered under its public id with a keyed digest of
    the key (never the key): its Caller, with what the cache needs besides in the same object
    (one a key, not two).

    `seal` is `header_digest("ApiKey " + key) & _DIGEST_BITS`, which only the exact key verified
    here has; for a key that expires, a pair of that and the moment it is refused from, cache
    or not. With the Caller's key name, id and terms, four slots: 64 bytes a key. The Caller's
    fields stay read-only: a changed key gets a new entry; the verifier sets `_terms` to the
    terms of their kind made for an epoch in which the key is noted (`Terms.noted_in`), with
    `_set`.
    """

    __slots__ = ("seal",)
    seal: int | tuple[int, datetime]

    @property
    def digest(self) -> int:
        """The key's digest, wherever the seal holds it (the cold path's reading)."""
        seal = self.seal
        return seal if seal.__class__ is int else seal[0]  # type: ignore[index]


_set = object.__setattr__  # an entry's own slots, past Caller's read-only __setattr__

# Kinds the cache shares among keys (scope sets, metadata, terms) kept at most, per table: each
# is kept for keys to come, so kinds no key holds any more (deleted keys, metadata an admin
# replaced) piled up for the process's life. Past this, a table starts again: keys cached keep
# their objects, and the next keys of a kind share one again.
KINDS_MAX = 10_000
K = TypeVar("K")


def _kept(table: dict[K, T], key: K, value: T) -> T:
    """table's object for key, else value, kept for the next keys (a table of KINDS_MAX kinds
    starts again)."""
    found = table.get(key)
    if found is None:
        if len(table) >= KINDS_MAX:
            table.clear()
        found = table[key] = value
    return found


class _Parts(NamedTuple):
    """What a verifier closes (`Verifier.close`), held apart from it: its finalizer's."""

    gate: CheckGate
    key_index: KeyIndex
    last_used: LastUsedWriter
    uses: UseCounts
    listener: PushFreshness | None
    source: CredentialSource
    engine: Engine
    # Whether closing disposes of the engine's pool: close() does, the finalizer only for an
    # engine `from_url` made (the caller's own, shared with a store, stays the caller's: an
    # in-memory SQLite database is its one connection, and disposing of it dropped the tables).
    dispose: bool


def _close(parts: _Parts) -> None:
    """Stop the threads (writing what they hold), then release the connections."""
    parts.gate.close()
    parts.key_index.close()
    parts.last_used.close()
    parts.uses.close()
    if parts.listener is not None:
        parts.listener.close()
    if parts.dispose:
        parts.source.close()  # its kept connections, then the engine's pool
        parts.engine.dispose()
    else:
        parts.source.release()  # its kept connections, back to the caller's pool


# The engines `Verifier.from_url` made: a verifier dropped without close() disposes of those.
_made_here: weakref.WeakSet[Engine] = weakref.WeakSet()


def _close_later(parts: _Parts) -> None:
    """`_close` in a thread: a verifier's finalizer runs where the collector does (an event
    loop's thread, say), and closing waits for threads and writes. Not a daemon: a verifier
    dropped as the process ends (a script's main() returning) is closed before it exits, as
    close() would be, where a daemon was killed mid-close, its uses and connections lost."""
    threading.Thread(target=_close, args=(parts,), name="apikey-tui-close").start()


class Verifier:
    """Checks API keys against the admins' database; thread-safe, one per service process.

    A request is answered from memory when it can be: a verified key is remembered with a
    keyed digest of it (argon2 runs at most once per key per process), and an index
    of every key's public id and secret fingerprint refuses unknown ids and wrong secrets
    without a query.
    Everything else (database reads, argon2) runs in a CheckGate with a deadline.
    """

    # Slots: the warm path reads a dozen of these per request, each then at a fixed offset in
    # one object (with more than 30 attributes, CPython 3.11 keeps them in a dict apart). A
    # __dict__ besides, empty unless used: a test may still patch a method of one verifier.
    __slots__ = (
        "__dict__",
        "__weakref__",
        "_ask_always",
        "_budget",
        "_clock",
        "_connections",
        "_engine",
        "_entries",
        "_exact",
        "_feed",
        "_finalizer",
        "_fingerprint_refused",
        "_freshness",
        "_gate",
        "_hasher",
        "_impatient_until",
        "_index",
        "_inline",
        "_last_used",
        "_limiter",
        "_limits_inline",
        "_lookups",
        "_metas",
        "_outage",
        "_patient",
        "_ready",
        "_rechecks",
        "_record",
        "_rehash_refused",
        "_scope_sets",
        "_shared_terms",
        "_source",
        "_sources",
        "_stale",
        "_tallies",
        "_uses",
        "realm",
        "restrictions",
        "stats",
    )

    def __init__(
        self,
        engine: Engine,
        *,
        realm: str = "api",
        hasher: SecretHasher | None = None,
        revocation_bound: float = DEFAULT_REVOCATION_BOUND,
        check_timeout: float = DEFAULT_CHECK_TIMEOUT,
        check_workers: int = 4,
        max_pending_checks: int = 64,
        failure_burst: float = 5,
        failures_per_second: float = 1,
        lookups_per_second: float = 1000,
        lookup_burst: float = 1000,
        flush_interval: float = 5.0,
        record_usage: bool = True,
        usage_limit: int = DEFAULT_LIMIT,
        clock: Clock = system_clock,
        limits_url: str | None = None,
        limits_fail: FailMode | str | None = None,
        limits_processes: int | None = None,
        limits_lease: int = LEASE_DEFAULT,
    ) -> None:
        if revocation_bound < 0:
            raise ValueError("revocation_bound must be 0 (always ask) or more seconds")
        self.realm = realm
        # The one wall clock, for expiry and the end of a grace (the inner store reads it too).
        self._clock = clock
        self._engine = engine
        # Limits count in a Redis-protocol server (limits_url, else APIKEY_TUI_LIMITS_URL) or
        # else in the key database (its own transactions: the engine before autocommit).
        self.restrictions = Restrictions.build(
            engine,
            limits_url=limits_url,
            fail=limits_fail,
            processes=limits_processes,
            lease=limits_lease,
            clock=clock,
        )
        self._limiter = self.restrictions.limiter
        # Writes in transactions (last used, usage all or none, a fingerprint, an upgraded
        # hash). Last-used writes never wait for a lock (`record_use`); the rest wait briefly,
        # well inside the request's deadline: a fingerprint or hash write is one key's, on the
        # request path once per key; a fingerprint's waits for the change log's lock holding
        # nothing, then takes its row without waiting (`add_fingerprint`: no wait cycle with
        # an admin's batch), one at a time (`_key_write`). With 1 ms, an admin's commit (which
        # holds the log's lock for a few ms) made them give up, and the key kept its old hash.
        wait = min(VERIFIER_LOCK_WAIT_S, check_timeout / 4)
        writes = engine.execution_options(**{LOCK_WAIT: wait})
        if engine.dialect.name == "postgresql":
            # Reads in autocommit: a cold check is one SELECT, not BEGIN + SELECT + ROLLBACK.
            engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        store = credential_source(engine, hasher=hasher, clock=clock, writes=writes)
        self._source: CredentialSource = store
        self._hasher = store.hasher
        self._freshness = freshness_for(engine, revocation_bound)
        # Only SQLite's commit watch sees every commit before the next request: with push or a
        # time bound, an id the index lacks may be a key committed a moment ago.
        self._exact = isinstance(self._freshness, CommitFreshness)
        # A sync request on a SQLite file runs its check in its own thread when it may (see
        # CheckGate.submit): reads there wait for a lock at most check_timeout (below).
        self._inline = self._exact
        # Where a limit's store call may run in a sync request's own thread: a store whose
        # calls end by themselves (see _admit).
        self._limits_inline = self._inline or self.restrictions.where != KEY_DATABASE
        self._ask_always = revocation_bound == 0 and isinstance(self._freshness, BoundFreshness)
        self._index = KeyIndex(self._source.key_count, self._source.fingerprint_page)
        self._feed = ChangeFeed(self._source, self._freshness, self._index, self._suspect)
        self._outage = OutageLog(log)  # a line per interval, not per request refused
        self._gate = CheckGate(check_workers, check_timeout, max_pending_checks, self._outage)
        self._budget = FailureBudget(failure_burst, failures_per_second)
        # Lookups of ids the index cannot vouch for yet (while it loads, a few seconds at a
        # million keys): a service restarting under real traffic needs many, a flood of forged
        # ids may buy at most this many point queries a second (and no more at once than the
        # CheckGate runs), then 503 until the index is in.
        self._lookups = TokenBucket(lookup_burst, lookups_per_second)
        self._rechecks = TokenBucket(RECHECK_BURST, RECHECKS_PER_SECOND)
        # At most one last_used_at write per key per epoch (a minute or more) per process.
        self._last_used = LastUsedWriter(self._source.record_use, flush_interval, clock)
        # Per key, per minute: requests allowed per scope, refused for scopes, wrong secrets;
        # flushed at least every 10 s (and at each minute boundary) off the request path.
        self._uses = UseCounts(
            self._source.record_usage, min(flush_interval, MAX_USAGE_INTERVAL), clock, usage_limit
        )
        self._record = record_usage
        self._tallies = self._uses.tallies
        self._sources = self._uses.sources  # the last client address noted per key
        self.stats = VerifierStats(self._gate, self._freshness, revocation_bound, self._uses)
        self._listen("handle_error", lambda verifier, context: verifier.stats.database_error())
        # A verified key is remembered under its public id (the entry's own string: one dict,
        # and a change finds its entry by the id it names) with header_digest("ApiKey " + key):
        # the warm path looks up the characters where "ApiKey <key>" holds the id, then
        # digests the header as it came (no test of its scheme), and a header that is not
        # exactly "ApiKey <a remembered key>" does not have the entry's digest.
        self._entries: dict[str, _Entry] = {}  # verified and unchanged since: the warm path
        self._stale: dict[str, _Entry] = {}  # verified, changed since: re-read, no argon2
        self._scope_sets: dict[frozenset[str], frozenset[str]] = {}
        self._metas: dict[tuple[tuple[str, str], ...], Mapping[str, str]] = {}
        # The newest terms of each kind (`Terms.heads`): one per owner, scope set and metadata.
        self._shared_terms: dict[Hashable, Terms] = {}
        self._ready = False
        self._rehash_refused = self._fingerprint_refused = False
        # At most one one-key write (`_key_write`) at a time waits for a lock, and none for a
        # while after one gave up (time.monotonic(): until then none waits).
        self._patient = threading.Lock()
        self._impatient_until = 0.0
        self._connections: dict[int, Any] = {}
        self._listen("connect", Verifier._on_connect)
        self._listen("close", Verifier._on_close)
        self._listen("close_detached", Verifier._on_close)
        forksafety.reset_in_child(self._after_fork)
        # Dropped without close() (an app made per test, a lifespan whose end never ran), it is
        # closed all the same, in a thread of its own: its threads hold its parts, not it, and
        # would write and keep connections for the process's life. Not at exit: daemon threads
        # writing while the interpreter shuts down end in noise, not in writes.
        owned = self._engine in _made_here
        self._finalizer = weakref.finalize(self, _close_later, self._parts(dispose=owned))
        self._finalizer.atexit = False

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Verifier:
        """Build a verifier on the database at url (no connection is made until the first check)."""
        engine = make_engine(
            url, create=False, pre_ping=False, application_name=VERIFIER_APPLICATION
        )
        _made_here.add(engine)
        return cls(engine, **options)

    def start(self) -> None:
        """Connect, check the schema and begin loading the key index now (blocking, tens of ms).

        Call it when the service starts (serve-auth does): the first request then finds the
        connections open and the schema checked, instead of paying for both and racing the
        index load it would start. A database that cannot be asked yet raises
        VerifierUnavailableError (logged); checks then retry by themselves.
        """
        self._ensure_ready()
        # One connection for the index load, one for requests (two CheckGate threads at once).
        self._read(lambda: self._source.open_reads(2))
        if self._feed.synced is None:
            deadline = time.monotonic() + self._gate.timeout
            self._gate.wait(self._gate.submit(_SYNC, self._sync, inline=self._inline), deadline)

    # --- the request path ---------------------------------------------------------------------

    def cached(
        self,
        authorization: str | None,
        required_scopes: Collection[str] = (),
        client: str | None = None,
        route: str | None = None,
    ) -> Caller | None:
        """The caller if this key was verified before and nothing changed since, else None.

        No query, no thread, no coroutine: an async integration calls it first and awaits
        verify_async only on None. Raises InsufficientScopeError like verify.
        """
        caller = self._warm(authorization)
        if caller is None:
            return None
        terms = caller._terms
        if not terms.limits:
            return self.authorize(caller, required_scopes, client, route)
        # A limit whose lease is spent needs the store: that is verify_async's, in a thread,
        # which judges the request again. So what _placed records (a shadow mode's would-be
        # refusal, the key's use) waits until this answer is final: recorded once a request.
        networks = terms.networks
        if networks is not None and (
            networks.judge(client) == REFUSE
            or (required_scopes and not terms.scopes.issuperset(required_scopes))
        ):
            self._placed(caller, client, route)  # raises, or records before the scopes refuse
        self._scoped(caller, required_scopes)
        spent = True  # a refusal from memory (a window the store granted none of) is final too
        try:
            spent = self._limited(caller, local=True)
        finally:
            if spent and networks is not None:
                self._placed(caller, client, route)
        if not spent:
            return None
        return self.authorize(caller, required_scopes, client, route, _spent=True)

    def verify(
        self,
        authorization: str | None,
        required_scopes: Collection[str] = (),
        client: str | None = None,
        route: str | None = None,
    ) -> Caller:
        """Return the caller, or raise an AuthError that knows its HTTP answer.

        client: the address the request comes from (the integration's peer, or the address a
        trusted proxy names: `networks.TrustedProxies`); None when unknown, which a key with
        network rules is refused for. route: the request's path, recorded with a refusal for
        the network (and a shadow mode's would-be refusal).
        """
        # Memory first, outside the cold path's machinery (refusal counting, a generator, a
        # deadline): those cost a warm check twice what the check itself does.
        caller = self._warm(authorization)
        if caller is None:
            caller = self._identify(authorization)
        return self.authorize(caller, required_scopes, client, route)

    def identify(self, authorization: str | None) -> Caller:
        """The caller, checking the key but no scope and recording no use (blocking).

        For a framework that decides scopes itself (DRF's permission classes): it then calls
        `authorize` exactly once per request, with the scopes the request needs, so the
        request is recorded once and under those scopes. Everyone else calls `verify`.
        """
        caller = self._warm(authorization)
        return caller if caller is not None else self._identify(authorization)

    def _identify(self, authorization: str | None) -> Caller:
        """identify past the warm path: the whole check, refusals counted."""
        # Refusals counted as in verify_async, by hand: a generator's context manager costs
        # a SQLite re-read (each check that reads the database) five calls.
        steps = self._answer(authorization, inline=self._inline, warmed=True)
        deadline = time.monotonic() + self._gate.timeout
        try:
            work = next(steps)
            while True:  # each step is work in a CheckGate thread, waited for here
                # (or already done in this thread: its outcome read without the deadline's sums)
                work = steps.send(
                    work.result() if work.__class__ is Done else self._gate.wait(work, deadline)
                )
        except StopIteration as done:
            caller: Caller = done.value
        except AuthError as error:
            self.stats.refused(error)
            raise
        except Exception:  # never a 500, never a pass
            raise self._unforeseen() from None
        return caller

    async def verify_async(
        self,
        authorization: str | None,
        required_scopes: Collection[str] = (),
        client: str | None = None,
        route: str | None = None,
    ) -> Caller:
        """Like verify; database and argon2 work never blocks the event loop."""
        caller = await self.identify_async(authorization)
        if not caller.limits:
            return self.authorize(caller, required_scopes, client, route)
        if caller.networks is not None:
            self._placed(caller, client, route)
        self._scoped(caller, required_scopes)
        if not self._limited(caller, local=True):  # the store's answer, never on the loop
            sent = time.monotonic()
            work = self._gate.submit(object(), lambda: self._limited(caller), inline=False)
            try:
                await self._gate.wait_async(work, sent + self._gate.timeout)
            except AuthError:
                if isinstance(work, Done) or work.done():
                    raise  # the store's answer: 429, or 503 in its failing mode
                self._refuse_late(caller)  # the deadline passed first
            except Exception:  # a store's unforeseen failure: never a 500, never a pass
                raise self._unforeseen() from None
        return self.authorize(caller, required_scopes, client, route, _spent=True)

    async def identify_async(self, authorization: str | None) -> Caller:
        """identify for an event loop: the caller, no scope judged and no use recorded;
        database and argon2 work never blocks the loop."""
        steps = self._answer(authorization, inline=False)
        deadline = time.monotonic() + self._gate.timeout
        try:
            work = next(steps)
            while True:  # the same steps as verify, awaited instead of waited for
                work = steps.send(await self._gate.wait_async(work, deadline))
        except StopIteration as done:
            caller: Caller = done.value
        except AuthError as error:  # each refusal counted, as in _identify
            self.stats.refused(error)
            raise
        except Exception:  # anything unforeseen is a check that could not be made: 503
            raise self._unforeseen() from None
        return caller

    @property
    def reads_every_check(self) -> bool:
        """Whether every check reads the database (`revocation_bound=0` where a bound, not a
        commit watch or a push, tells changes): a caller of many checks bounds them itself."""
        return self._ask_always

    def unchanged(self, authorization: str | None, caller: Caller) -> bool:
        """Whether this header is still answered from memory by this very caller: the key
        unchanged, unexpired and nothing committed unread since (no query, no lock). False
        asks for the full check (`identify_async`), which may find the key unchanged too."""
        found = self._warm(authorization)
        if found is not None:
            self.stats.hits -= 1  # a message, not a check: _warm counted it as one
        return found is caller

    def readmit(
        self,
        caller: Caller,
        required: Collection[str],
        client: str | None = None,
        route: str | None = None,
    ) -> Caller:
        """The caller again, for a later message of a connection it opened (a WebSocket): its
        network rules and scopes judged, refusals recorded as any; no limit spent and no use
        counted, since a message is not a request."""
        if caller.networks is not None:
            self._placed(caller, client, route)
        self._scoped(caller, required)
        return caller

    def _answer(
        self, authorization: str | None, *, inline: bool, warmed: bool = False
    ) -> Generator[Run[Any], Any, Caller]:
        """The one check, for verify and verify_async (httpx's habit: one generator, two drivers).

        It yields work submitted to the CheckGate and is sent that work's result; it returns
        the caller or raises an AuthError. Memory answers first; the change log is read only
        when the freshness generation moved; the key index refuses unknown ids and wrong
        secrets before any key read or argon2.

        warmed: the caller asked `_warm(authorization)` already (verify, identify), so a header
        in the usual spelling is not looked up twice.
        """
        credential = split_credentials(authorization)
        # The usual spelling, whatever the header's: its digest is what the warm path computes
        # from the header "ApiKey <key>" itself. It is also the key of the check's work in the
        # CheckGate (the same key asked at once is checked once): the exact string, not its
        # digest, so two keys in flight never share an answer, however their digests compare.
        usual = _USUAL + credential
        digest = header_digest(usual) & _DIGEST_BITS
        assert authorization is not None  # split_credentials refused None
        if not (
            warmed
            and authorization.__class__ is str  # a subclass: `_warm` did not look it up
            and len(authorization) == len(credential) + len(_USUAL)
            and authorization.startswith(_USUAL)  # so credential is authorization[7:]
        ):
            # "apikey  <key>" is remembered too (an id that is not one misses)
            caller = self._warm(None, digest, credential[: keyformat.ID_LENGTH])
            if caller is not None:
                return caller
        parsed = parse_key(credential)
        judge = self._index.judge
        verdict, presented = judge(parsed.public_id, parsed.secret)
        if self._feed.synced != self._freshness.generation() and not (
            # Asked at every check (bound 0), a key the index vouches for is read anyway.
            self._ask_always and verdict in (Verdict.MATCH, Verdict.LEGACY)
        ):
            yield from self._synced(inline)
            if parsed.public_id in self._entries:  # an unrelated commit leaves it cached
                caller = self._warm(None, digest, parsed.public_id)
                if caller is not None:
                    return caller
            verdict, presented = judge(parsed.public_id, parsed.secret, presented)
        if verdict is Verdict.UNKNOWN and not self._exact:
            # A push (or time bound) may lag a commit by milliseconds: a key created a moment
            # ago reads the log once more, at once if its notice is waiting unread, else within
            # a small budget that forged ids share (3, then 1 a second). Once a flood has spent
            # that budget, the id is looked up by itself under the lookup budget, as while the
            # index loads: a new key is never refused for its notice being late, and past both
            # budgets the answer is 503 (try again), never a 401 that may be wrong.
            if self._notice_waits() or self._rechecks.take():
                yield from self._synced(inline)
                verdict, presented = judge(parsed.public_id, parsed.secret, presented)
            else:
                verdict = Verdict.UNSURE
        if verdict is Verdict.WRONG:
            if self._record:  # a known public id with a wrong secret: a leak or attack signal
                self._uses.wrong_secret(parsed.public_id)
            raise InvalidKeyError()
        if verdict is Verdict.UNKNOWN:  # nothing recorded: unknown ids are unbounded
            raise InvalidKeyError()
        unsure = verdict is Verdict.UNSURE
        if unsure and not self._lookups.take():
            raise VerifierUnavailableError()  # index still loading and a flood of unknown ids
        if verdict is Verdict.LEGACY and not self._budget.allows(parsed.public_id):
            raise InvalidKeyError()
        checked: Caller = yield self._gate.submit(
            usual, lambda: self._check(parsed, digest, presented), inline=inline
        )
        if unsure:  # a lookup that proved a key: only ids no key holds spend the budget
            self._lookups.refund()
        self.stats.cold_answers += 1
        return checked

    def _notice_waits(self) -> bool:
        """PostgreSQL push: whether a notice arrived that the change feed has not read yet."""
        freshness = self._freshness
        return isinstance(freshness, PushFreshness) and freshness.peek() != self._feed.synced

    def _synced(self, inline: bool) -> Generator[Run[Any], Any, None]:
        """Steps until a log read begun after this call has finished (at most two reads)."""
        ticket = self._feed.ticket()
        while not self._feed.covers(ticket):
            yield self._gate.submit(_SYNC, self._sync, inline=inline)

    def _unforeseen(self) -> VerifierUnavailableError:
        log.exception("API key check failed unexpectedly; answering 503")
        error = VerifierUnavailableError()
        self.stats.refused(error)
        return error

    def _warm(
        self, authorization: str | None, digest: int | None = None, public_id: str = ""
    ) -> Caller | None:
        """The caller of a key verified before and unchanged since, else None (no refusal).

        One dict lookup, one digest and one freshness test: no query, no lock. The header is
        looked up in its usual spelling only; the full check passes the digest and the id of
        its parse instead. Anything that goes wrong here (a freshness test that fails) is left
        to the full check, which repeats it and counts and answers the refusal.
        """
        try:
            if digest is None:
                # None, and a str subclass, which may hash or slice as it likes, take the full
                # check (one test, where `is None` was).
                if authorization.__class__ is not str:
                    return None
                # The id where "ApiKey <key>" holds it; a miss raises nothing: floods miss.
                entry = self._entries.get(authorization[_HEADER_ID])
                if entry is None:
                    return None
                # The digest of the whole header: only "ApiKey <key>" has an entry's, so the
                # scheme is not looked at.
                digest = header_digest(authorization) & _DIGEST_BITS
            else:
                entry = self._entries.get(public_id)
                if entry is None:
                    return None
            # `!=`, not compare_digest: a digest is a keyed hash, so learning how much of it
            # matches tells nobody which header would match it all. A key that expires has a
            # pair for a seal (never equal to an int): records.secret_works inline for it (never
            # a disabled key's; a call would be a tenth of this path), from the exact second on
            # refused here, and by the full check.
            seal = entry.seal
            if seal != digest and not (
                seal.__class__ is tuple and seal[0] == digest and self._clock() < seal[1]
            ):
                return None
            if self._feed.synced != self._freshness.generation():
                return None
            terms = entry._terms
            epoch = self._last_used.epoch  # no clock read: the writer's thread moves it
            # A key with network rules is noted once its request passed them (`_placed`).
            if terms.noted is not epoch and terms.networks is None:
                _set(entry, "_terms", terms.noted_in(epoch))
                self._last_used.note(entry.public_id)
        except Exception:  # UnicodeEncodeError (a lone surrogate, to BLAKE2b) included
            return None
        self.stats.hits += 1  # the warm path's only metrics cost: a plain int
        return entry

    def authorize(
        self,
        caller: Caller,
        required: Collection[str],
        client: str | None = None,
        route: str | None = None,
        *,
        _spent: bool = False,
    ) -> Caller:
        """The caller if its network rules admit `client` (else NetworkNotAllowedError, 403),
        it holds every required scope (else InsufficientScopeError, 403) and its limits have
        room (else RateLimitedError, 429, or LimitsUnavailableError, 503: see
        `verifier.restrictions`); either way one request of this key is recorded (`verify`
        calls it; see `identify`). Blocking only when a limit needs a new lease.

        _spent: internal, for cached and verify_async, which judged the network and spent the
        limits already.
        """
        terms = caller._terms  # one read, then slots: Caller's properties are calls
        networks = terms.networks
        if (
            networks is not None
            and not _spent
            and (
                # A pass of a key whose use was noted this epoch costs no call of _placed.
                networks.judge(client) or networks.noted is not self._last_used.epoch
            )
        ):
            self._placed(caller, client, route)
        if required and not terms.scopes.issuperset(required):
            self._scoped(caller, required)
        if terms.limits and not _spent:
            # Inline: the warm path of a limited key with tokens in hand (docs/reference/limits.md)
            # spends them without a lock; admit leases, refuses, or spends under the lock.
            # A caller without leases (a copy or a pickle, `Caller.__reduce__`) spends nothing
            # by them: `spend(())` is True. _admit spends its limits by their keys.
            if not (terms.leases and self._limiter.spend(terms.leases)):
                self._admit(caller)
        if self._record:  # the warm path's only recording cost: two lookups and a C next()
            spelling = required if required.__class__ in HASHABLE else tuple(required)
            try:  # no thread switch inside this line: CPython hands the GIL over only at
                # function entries, loop ends and after calls, so a reading never finds a tally
                # that a request holds but has not advanced yet (none is retired under it)
                next(self._tallies[spelling][caller.public_id])
            except KeyError:  # this key's first such request here
                self._uses.allowed(caller.public_id, spelling)
            # Where it came from, for `keys networks --propose`: noted when it differs from the
            # last address noted for this key (the usage writer forgets those every minute).
            if client is not None and self._sources.get(caller.public_id) != client:
                self._uses.came_from(caller.public_id, client)
        return caller

    def _placed(self, caller: Caller, client: str | None, route: str | None) -> None:
        """Raise NetworkNotAllowedError (403, recorded as its own kind) unless the caller's
        network rules admit client; a shadow mode's would-be refusal is recorded and passes.

        Before the scopes and the limits: a refusal here consumes no limit and no last-used
        time. An admitted request notes the key's use (once per epoch, as the warm path does).
        """
        assert caller.networks is not None
        verdict = caller.networks.judge(client)
        public_id = caller.public_id
        if verdict:
            if verdict == REFUSE:
                self.stats.network_refused += 1
                if self._record:
                    self._uses.network(public_id, client, route, refused=True)
                raise NetworkNotAllowedError()
            if verdict == WOULD_REFUSE:
                self.stats.network_shadowed += 1
                if self._record:
                    self._uses.network(public_id, client, route, refused=False)
        epoch = self._last_used.epoch
        if caller.networks.noted is not epoch:  # noted once per epoch, on its Placement
            caller.networks.noted = epoch
            self._last_used.note(public_id)

    def _scoped(self, caller: Caller, required: Collection[str]) -> None:
        """Raise InsufficientScopeError (403, recorded) unless the caller holds required."""
        if required and not caller.scopes.issuperset(required):
            self.stats.forbidden += 1
            missing = sorted(set(required) - caller.scopes)
            if self._record:
                self._uses.forbidden(caller.public_id, missing)
            raise InsufficientScopeError(missing)

    def _limited(self, caller: Caller, *, local: bool = False) -> bool:
        """Spend a request of each of the caller's limits, or raise its refusal (429, 503).

        local: never ask the store; False when only the store can say (nothing spent)."""
        if self._limiter.spend(caller.leases):
            return True
        if local:
            decision = self._limiter.admit_local(caller.limits, time.monotonic())
            if decision is None:
                return False
        else:
            decision = self._limiter.admit(caller.limits, time.monotonic())
        if decision is not ADMITTED:
            self._refuse(caller, decision)
        return True

    def _admit(self, caller: Caller) -> None:
        """Spend a request of each of the caller's limits, for a sync check without tokens in
        hand: a store call (a new lease) runs under the check's deadline, as a key read does.

        A store that accepts connections but never answers (a frozen PostgreSQL acknowledges
        TCP, so no socket bound fires) would otherwise hold the request's thread, and every
        request waiting for that take, for as long as it stays frozen. Past the deadline the
        store counts as down: the declared mode answers (fail-closed: 503)."""
        limiter = self._limiter
        decision = limiter.admit_local(caller.limits, time.monotonic())
        if decision is None:
            sent = time.monotonic()
            # Redis (socket bounds) and SQLite (busy timeout = check_timeout) are bounded by
            # themselves: run there in this thread when the gate allows, as a SQLite read does.
            work = self._gate.submit(
                object(),
                lambda: limiter.admit(caller.limits, time.monotonic()),
                inline=self._limits_inline,
            )
            try:
                decision = self._gate.wait(work, sent + self._gate.timeout)
            except VerifierUnavailableError:
                if isinstance(work, Done) or work.done():
                    raise
                self._refuse_late(caller)  # the deadline passed first
                return
            except Exception:  # a store's unforeseen failure: never a 500, never a pass
                raise self._unforeseen() from None
        if decision is not ADMITTED:
            self._refuse(caller, decision)

    def _refuse_late(self, caller: Caller) -> None:
        """A store call that did not return by the deadline: the declared mode's answer (raised
        unless fail-open admits the request from its local allowance)."""
        decision = self._limiter.unanswered(caller.limits, time.monotonic())
        if decision is not ADMITTED:
            self._refuse(caller, decision)

    def _refuse(self, caller: Caller, decision: object) -> None:
        """Count and raise a limit's refusal: 429 (recorded as its own kind) or 503."""
        error = refusal(decision)  # type: ignore[arg-type]
        assert error is not None
        if isinstance(error, RateLimitedError):
            self.stats.limited += 1
            if self._record:
                self._uses.limited(caller.public_id, error.policy)
        elif isinstance(error, LimitsUnavailableError):
            self.stats.limits_unavailable += 1
            self._outage.warning(
                "request limits cannot be checked (%s): answering 503", self.restrictions.where
            )
        raise error

    # --- in a CheckGate thread ----------------------------------------------------------------

    def _ensure_ready(self) -> None:
        if self._ready:
            return
        try:
            ensure_schema(self._engine, create=False, verifier=True)
        except (StoreUnavailableError, SchemaVersionError) as exc:
            self._outage.warning("API keys cannot be checked: %s", exc)
            raise VerifierUnavailableError() from None
        self._ready = True

    def _sync(self) -> None:
        self._ensure_ready()
        self._read(self._feed.sync)

    def _read(self, read: Callable[..., T], *args: Any) -> T:
        """A database read, read(*args), once more if it failed (a kept connection the server
        dropped).

        A second failure is a database that cannot answer: logged, and 503.
        """
        try:
            try:
                return read(*args)
            except StoreUnavailableError:
                return read(*args)
        except StoreUnavailableError as exc:
            self._outage.warning("API keys cannot be checked: %s", exc)
            raise VerifierUnavailableError() from None

    def _check(self, parsed: ParsedKey, digest: int, presented: bytes | None = None) -> Caller:
        """Read the key; run argon2 only when this exact key was never verified here.

        presented: the secret's fingerprint if the index judged it already (computed once)."""
        self.stats.cold += 1
        self._ensure_ready()
        mark = self._feed.mark()  # before reading: a change read meanwhile wins, see may_cache
        stored = self._read(self._source.credential, parsed.public_id)
        expires_at = stored.expires_at if stored is not None else None
        wrong = (
            stored is not None
            and stored.fingerprint is not None
            and not hmac.compare_digest(
                stored.fingerprint,
                fingerprint(parsed.public_id, parsed.secret)
                if presented is None
                else presented.hex(),
            )
        )
        if wrong and self._record:
            self._uses.wrong_secret(parsed.public_id)
        if (
            stored is None
            or not stored.works(self._clock())  # the one decision (records.secret_works)
            # Looked up past the index (still loading): its fingerprint still spares argon2.
            or wrong
        ):
            # Unknown, disabled, expired, or a previous secret past its grace: one same 401.
            if stored is None or not stored.works(self._clock()):  # not for a wrong secret
                self._drop(parsed.public_id)
            if stored is None:
                self._index.forget(parsed.public_id)
            raise InvalidKeyError()
        # The entry, fresh or stale, of this exact key (argon2 proved it here), else None.
        entry = self._entries.get(parsed.public_id) or self._stale.get(parsed.public_id)
        if entry is not None and entry.digest != digest:
            entry = None  # another secret under this id: proven by nothing here
        if entry is not None and stored.fingerprint is not None:
            # Known key, cache entry merely stale: argon2 proved this exact key here, and its
            # secret still matches the fingerprint stored now (`wrong` above). Recreate and
            # rotate give a new public id; a hash replaced under this id by any other writer
            # comes with another secret's 64-bit fingerprint, or none: a key without one
            # (made by 0.1.0, where this role may not add it) is proven by argon2 again.
            self.stats.revalidated += 1
            # This request is a use: noted here unless the key was noted this epoch already
            # (the warm path, which notes, did not answer it). A key with network rules is
            # noted once its request passes them (`_placed`).
            # A key that had rules was noted on its Placement: its terms' epoch says nothing.
            was = entry._terms
            epoch, noted = self._last_used.epoch, was.noted if was.networks is None else None
            fresh = self._entry(stored, expires_at, digest)
            with self._feed.lock:
                if self._feed.may_cache(parsed.public_id, mark) and (
                    self._stale.pop(entry.public_id, None) is entry
                    or self._entries.get(entry.public_id) is entry
                ):
                    self._entries[entry.public_id] = fresh
            if noted is not epoch and fresh._terms.networks is None:
                self._last_used.note(fresh.public_id)
            return fresh
        if (
            stored.fingerprint is None
            and entry is None
            and not self._budget.allows(parsed.public_id)
        ):
            # The budget guards argon2 itself, whatever the index said before: an id looked up
            # while the index (re)loads reaches here without the request path's early test.
            raise InvalidKeyError()
        self.stats.argon2 += 1
        if not self._hasher.verify(stored.secret_hash, parsed.secret):
            if entry is not None:
                # The key verified here has another hash now: forgotten (and counted revoked)
                # once, so its old secret meets the failure budget like any other, not argon2
                # at every request that the index cannot judge.
                self._drop(parsed.public_id)
            if self._record:
                self._uses.wrong_secret(parsed.public_id)
            if stored.fingerprint is None:
                self._budget.spend(parsed.public_id)
            raise InvalidKeyError()
        if stored.fingerprint is None:
            self._add_fingerprint(parsed)
        if self._hasher.needs_rehash(stored.secret_hash):
            self._upgrade_hash(parsed, stored)
        entry = self._entry(stored, expires_at, digest)
        with self._feed.lock:
            if self._feed.may_cache(parsed.public_id, mark):
                self._stale.pop(parsed.public_id, None)
                self._entries[entry.public_id] = entry  # the caller's string: one a key
        if entry._terms.networks is None:  # else noted once its request passes them (_placed)
            self._last_used.note(entry.public_id)  # the cached string, not a second copy
        if self._record:
            self._uses.start()  # warm hits append to it from now on
        return entry

    def _add_fingerprint(self, parsed: ParsedKey) -> None:
        """Give a key made by 0.1.0, just verified, its fingerprint: wrong secrets for it then
        cost no argon2, here or anywhere. Skipped (logged once) where this role may not."""
        found = fingerprint(parsed.public_id, parsed.secret)
        try:
            self._key_write(
                lambda wait: self._source.add_fingerprint(parsed.public_id, found, wait=wait)
            )
        except StoreUnavailableError as exc:
            if not self._fingerprint_refused:
                log.warning("API key fingerprint not stored (the key still works): %s", exc)
            self._fingerprint_refused = True

    def _upgrade_hash(self, parsed: ParsedKey, stored: Credential) -> None:
        """Store the secret hashed with today's profile; skipped (logged once) if not allowed."""
        upgraded = self._hasher.hash(parsed.secret)
        try:
            self._key_write(
                lambda wait: self._source.replace_hash(
                    parsed.public_id, stored.secret_hash, upgraded, wait=wait
                )
            )
        except StoreUnavailableError as exc:
            if not self._rehash_refused:
                log.warning("API key hash upgrade skipped (the key still works): %s", exc)
            self._rehash_refused = True

    def _key_write(self, write: Callable[[float | None], object]) -> None:
        """Run one key's write (a fingerprint, an upgraded hash) given its lock wait: the
        writes' own (0.2 s) for one write at a time, none after one gave up (for
        KEY_WRITE_BACKOFF_S), else none (NO_LOCK_WAIT_S): a key whose write gives up is written
        at its next cold check.

        Each waits in one of the few check threads, ahead of every check queued there: a burst
        of keys needing one (legacy keys, a new hash profile) behind a lock any role may take
        (the change log's) kept them all waiting 0.2 s each, and the checks queued behind were
        503 at their deadline. Raises what the write raised.
        """
        patient = time.monotonic() >= self._impatient_until and self._patient.acquire(
            blocking=False
        )
        try:
            write(None if patient else NO_LOCK_WAIT_S)
        except StoreUnavailableError:
            if patient:
                self._impatient_until = time.monotonic() + KEY_WRITE_BACKOFF_S
            raise
        finally:
            if patient:
                self._patient.release()

    def _suspect(self, changes: Iterable[Change] | None) -> None:
        """Changed keys leave the warm cache (None: every key); deleted ones are dropped.

        The others wait in `_stale`: re-read once, a key whose secret did not change (a new
        scope, an expiry) is trusted again without argon2.
        """
        if changes is None:
            self._stale.update(self._entries)
            self._entries = {}
            return
        for _seq, public_id, _stored, exists in changes:
            if not exists:
                self._drop(public_id)
                continue
            entry = self._entries.pop(public_id, None)
            if entry is not None:
                self._stale[entry.public_id] = entry

    def _drop(self, public_id: str) -> None:
        """Forget a key verified here (counted as revoked), if it is remembered."""
        fresh = self._entries.pop(public_id, None)
        if self._stale.pop(public_id, None) is not None or fresh is not None:
            self.stats.revoked += 1

    def _entry(self, stored: Credential, expires_at: datetime | None, digest: int) -> _Entry:
        """The cache entry (and Caller) of a key just read, noted in this epoch (its callers
        note its use: `LastUsedWriter.epoch`)."""
        epoch = self._last_used.epoch
        info = stored.info
        owner = sys.intern(info.owner)
        scopes = frozenset(info.scopes)
        scopes = _kept(self._scope_sets, scopes, scopes)
        limits = applied_limits(stored)
        networks = placement(stored)
        meta = stored.meta
        items = tuple(meta.items()) if meta else ()
        if meta:  # many keys carry their owner's metadata alone: one object each
            meta = _kept(self._metas, items, meta)
        if limits or networks is not None:  # leases and a Placement are the key's own
            leases = self._limiter.leases(limits) if limits else ()
            terms = Terms(owner, scopes, limits, networks, leases, meta, epoch)
        else:
            # Many keys share an owner, a scope set and metadata: one Terms an epoch for all of
            # them, where each key's own were 8 slots (issue 31).
            alike = (owner, scopes, items)
            heads = self._shared_terms
            head = heads.get(alike) or _kept(
                heads, alike, Terms(owner, scopes, meta=meta, noted=epoch, heads=heads, alike=alike)
            )
            terms = head.noted_in(epoch)
        entry: _Entry = _Entry.__new__(_Entry)
        _set(entry, "key_name", info.name)
        _set(entry, "public_id", info.public_id)
        _set(entry, "_terms", terms)
        _set(entry, "seal", digest if expires_at is None else (digest, expires_at))
        return entry

    # --- resources ----------------------------------------------------------------------------

    def _listen(self, name: str, call: Callable[..., None]) -> None:
        """Listen to the engine's event `name` with call(verifier, *its arguments), holding the
        verifier weakly: the engine's pool and dialect outlive it (SQLAlchemy holds a pool while
        a connection is out, as a kept read is; the reads' compiled statements keep the first
        SQLite dialect of the process, `change_log._raw`), and must not keep it alive, its
        caches, index and kept connections with it, once it is dropped: after close(), or
        used again since (a request still in flight, an app whose lifespan ran twice)."""
        alive = weakref.ref(self)

        def listener(*arguments: Any) -> None:
            verifier = alive()
            if verifier is not None:
                call(verifier, *arguments)

        event.listen(self._engine, name, listener)

    def _on_connect(self, dbapi_connection: Any, _record: Any) -> None:
        self._connections[id(dbapi_connection)] = dbapi_connection
        if self._inline:
            # A check may run in the request's own thread, which no deadline can interrupt:
            # its wait for a SQLite lock (WAL readers rarely wait at all) ends at check_timeout.
            wait = max(1, int(self._gate.timeout * 1000))
            dbapi_connection.execute(f"PRAGMA busy_timeout={wait}")

    def _on_close(self, dbapi_connection: Any, _record: Any = None) -> None:
        self._connections.pop(id(dbapi_connection), None)

    def _after_fork(self) -> None:
        """In a forked child: drop the parent's threads, locks, caches and connections."""
        self._gate.reset()
        self._last_used.reset()
        self._uses.reset()
        self._index.reset()
        self._feed.reset()
        self._budget.reset()
        self._outage.reset()
        self._lookups.reset()
        self._rechecks.reset()
        self._patient = threading.Lock()  # a parent's thread may have held it at the fork
        self._entries, self._stale = {}, {}
        # Inherited connections are parked, never closed or used (see forksafety._parked).
        forksafety.park(list(self._connections.values()))
        self._connections = {}
        self._engine.dispose(close=False)

    def flush(self) -> None:
        """Write pending last-used times and usage counts now (also done in the background)."""
        self._last_used.flush()
        self._uses.flush()

    def close(self) -> None:
        """Flush last-used times and usage counts, stop the threads and release connections.

        The process's SQLite commit watch stays open on purpose (see sqlite_watch.CommitWatch).
        """
        # The finalizer stays: a verifier used after close() (a request still in flight, an
        # app whose lifespan ran twice) starts threads again, which only it would end. Closing
        # closed parts again, once, costs nothing.
        _close(self._parts(dispose=True))

    def _parts(self, *, dispose: bool) -> _Parts:
        return _Parts(
            self._gate,
            self._index,
            self._last_used,
            self._uses,
            self._freshness if isinstance(self._freshness, PushFreshness) else None,
            self._source,
            self._engine,
            dispose,
        )

    def cache_size(self) -> int:
        """How many verified keys this process remembers (fresh ones)."""
        return len(self._entries)

    def known_keys(self) -> int:
        """How many public ids the key index holds."""
        return len(self._index)

    def index_bytes(self) -> int:
        """The key index's size in bytes (its packed snapshot)."""
        return self._index.nbytes()

    def wait_index(self, timeout: float = 60.0) -> bool:
        """Wait for the key index to finish loading (benchmarks, tests); whether it has."""
        return self._index.wait_loaded(timeout)
