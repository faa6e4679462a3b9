"""Usage: exact counts from verifiers, reports, right-sizing and compaction, on both backends."""

from __future__ import annotations

import json
import multiprocessing
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import event, text

from apikey_tui import keyformat
from apikey_tui.cli import main
from apikey_tui.clock import system_clock
from apikey_tui.db.models import DAY, HOUR, MINUTE, USAGE_ALLOWED, usage_minute
from apikey_tui.errors import InsufficientScopeError, InvalidKeyError, StoreUnavailableError
from apikey_tui.store import KeyStore, rightsizing
from apikey_tui.store.credentials import CredentialReads, credential_source
from apikey_tui.verifier import Verifier
from tests import usage_workers
from tests.conftest import ACTOR, CHEAP, FakeClock

N, M, W = 7, 3, 2


@pytest.fixture
def keys(database_url: str, clock: FakeClock) -> Iterator[KeyStore]:
    """An admin store on the fake clock, with an 'admin' scope in the catalog."""
    store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR, clock=clock)
    store.add_scope("admin")
    yield store
    store.close()


_wrong = usage_workers.wrong


def _use(verifier: Verifier, plaintext: str, n: int = N, m: int = M, w: int = W) -> None:
    for _ in range(n):
        verifier.verify("ApiKey " + plaintext, ("project",))
    for _ in range(m):
        with pytest.raises(InsufficientScopeError):
            verifier.verify("ApiKey " + plaintext, ["project", "admin"])
    for _ in range(w):
        with pytest.raises(InvalidKeyError):
            verifier.verify("ApiKey " + _wrong(plaintext), ("project",))


def _usage_json(url: str, capsys: pytest.CaptureFixture[str], name: str) -> dict[str, Any]:
    assert main(["--database-url", url, "--owner", "alice", "keys", "usage", name, "--json"]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


@pytest.fixture
def admin(store: KeyStore) -> KeyStore:
    """The store on the system clock (the CLI reads it too), with an 'admin' scope."""
    store.add_scope("admin")
    return store


def test_counts_are_exact_after_close(
    database_url: str, admin: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """N allowed for project, M refused for admin, W wrong secrets: close(), usage shows N, M, W."""
    created = admin.create_key("alice", "svc", ["project", "serving"])
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    _use(verifier, created.plaintext)
    verifier.close()
    report = admin.key_usage("alice", "svc")
    assert [(s.scope, s.requests) for s in report.scopes] == [("project", N), ("serving", 0)]
    assert [(f.missing, f.requests) for f in report.forbidden] == [(("admin",), M)]
    assert (report.requests, report.wrong_secret) == (N, W)
    assert sum(p.allowed for p in report.daily) == sum(p.allowed for p in report.hourly) == N
    data = _usage_json(database_url, capsys, "svc")
    assert data["scopes"][0] == {
        "scope": "project",
        "requests": N,
        "last_used": report.scopes[0].last_used.isoformat(),  # type: ignore[union-attr]
    }
    assert data["scopes"][1] == {"scope": "serving", "requests": 0, "last_used": None}
    assert data["forbidden"] == [{"missing": ["admin"], "requests": M}]
    assert data["wrong_secret"] == W
    view = admin.usage_overview()
    svc = ("svc", N, M, W, (((("admin",), M)),))
    for listed in (view.busiest, view.forbidden, view.wrong_secret):
        assert [
            (
                a.name,
                a.allowed,
                a.forbidden,
                a.wrong_secret,
                tuple((f.missing, f.requests) for f in a.missing),
            )
            for a in listed
        ] == [svc]
    days = admin.daily_requests([created.info.public_id, "akunknown"], 3)
    assert (sum(days[created.info.public_id]), days["akunknown"]) == (N, (0, 0, 0))
    assert admin.usage_overview(owner="alice").busiest[0].allowed == N
    assert admin.usage_overview(owner="bob").busiest == ()
    stats = verifier.stats.snapshot()
    assert stats["usage_recorded"] == stats["usage_flushed"] == N + M + W
    assert stats["usage_dropped"] == 0


def test_unknown_ids_are_not_recorded(database_url: str, keys: KeyStore, clock: FakeClock) -> None:
    """A forged public id leaves no row: their number is unbounded."""
    keys.create_key("alice", "svc", ["project"])
    verifier = Verifier.from_url(database_url, hasher=CHEAP, clock=clock)
    forged = keyformat.generate()[1]
    for _ in range(3):
        with pytest.raises(InvalidKeyError):
            verifier.verify("ApiKey " + forged, ("project",))
    verifier.close()
    with keys.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM apikey_tui_usage")).scalar_one() == 0


def test_usage_writes_never_reach_the_change_log(
    database_url: str, keys: KeyStore, clock: FakeClock
) -> None:
    """Recording use appends no change-log entry (verifiers would drop a key for nothing)."""
    created = keys.create_key("alice", "svc", ["project"])
    before = keys.log_position()
    verifier = Verifier.from_url(database_url, hasher=CHEAP, clock=clock)
    _use(verifier, created.plaintext)
    verifier.close()
    assert keys.log_position() == before


def test_memory_is_bounded_and_drops_are_counted(
    database_url: str, keys: KeyStore, clock: FakeClock
) -> None:
    """Past the bound a new entry is dropped and counted; existing entries still count."""
    a = keys.create_key("alice", "a", ["project"])
    b = keys.create_key("alice", "b", ["project"])
    verifier = Verifier.from_url(database_url, hasher=CHEAP, clock=clock, usage_limit=1)
    for _ in range(3):
        verifier.verify("ApiKey " + a.plaintext, ("project",))
        verifier.verify("ApiKey " + b.plaintext, ("project",))
    verifier.close()
    assert verifier.stats.snapshot()["usage_dropped"] == 3
    assert keys.key_usage("alice", "a").requests == 3
    assert keys.key_usage("alice", "b").requests == 0


def test_counts_are_exact_with_threads_racing_the_writer(
    database_url: str, keys: KeyStore, clock: FakeClock
) -> None:
    """Four threads check one key (scopes as a tuple, a frozenset and a fresh list) while flushes
    and minute changes read the tallies again and again: every request is written, once."""
    created = keys.create_key("alice", "svc", ["project", "serving"])
    verifier = Verifier.from_url(database_url, hasher=CHEAP, clock=clock)
    header, rounds = "ApiKey " + created.plaintext, 3000
    verifier.verify(header, ("project",))
    spellings: list[Any] = [("project",), frozenset({"project", "serving"}), None]

    def check(spelling: Any) -> None:
        for _ in range(rounds):
            verifier.verify(header, ["project"] if spelling is None else spelling)

    threads = [threading.Thread(target=check, args=(s,)) for s in [*spellings, ("project",)]]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        verifier.flush()
        clock.advance(timedelta(seconds=20))  # a reading at each minute boundary too
    for thread in threads:
        thread.join()
    verifier.close()
    usage = keys.key_usage("alice", "svc", timedelta(days=1))
    assert {(s.scope, s.requests) for s in usage.scopes} == {
        ("project", 4 * rounds + 1),
        ("serving", rounds),
    }
    assert verifier.stats.snapshot()["usage_dropped"] == 0


@pytest.mark.parametrize("required", [("project",), ()])
def test_a_reading_frees_every_tally_and_the_limit_bounds_those_made_between_two(
    database_url: str, keys: KeyStore, clock: FakeClock, required: tuple[str, ...]
) -> None:
    """With room for one tally (and one count), a second key's requests are noted instead (and
    dropped, counted, for want of a count); a reading frees every tally, so the next key to ask
    takes the room, and a key holds none while it is not used (also for a check that required
    no scope)."""
    a = keys.create_key("alice", "a", ["project"])
    b = keys.create_key("alice", "b", ["project"])
    verifier = Verifier.from_url(database_url, hasher=CHEAP, clock=clock, usage_limit=1)
    uses = verifier._uses

    def check(created: Any, times: int) -> None:
        for _ in range(times):
            verifier.verify("ApiKey " + created.plaintext, required)

    check(a, 3)
    check(b, 2)  # no room for b's tally: noted (then no room for its count: dropped)
    assert list(uses.tallies[required]) == [a.info.public_id]
    verifier.flush()
    assert uses.tallies == {}  # read and freed: a key costs no tally while unused
    check(b, 4)
    assert list(uses.tallies[required]) == [b.info.public_id]
    verifier.flush()
    check(a, 1)
    verifier.close()
    assert (keys.key_usage("alice", "a").requests, keys.key_usage("alice", "b").requests) == (4, 4)
    assert verifier.stats.snapshot()["usage_dropped"] == 2


@pytest.mark.slow
def test_counts_are_exact_across_two_processes(
    database_url: str, admin: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two verifier processes each record N, M, W: `keys usage --json` gives 2N, 2M, 2W."""
    created = admin.create_key("alice", "svc", ["project"])
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(
            target=usage_workers.verify, args=(database_url, created.plaintext, N, M, W)
        )
        for _ in "ab"
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    data = _usage_json(database_url, capsys, "svc")
    assert data["scopes"] == [
        {"scope": "project", "requests": 2 * N, "last_used": data["scopes"][0]["last_used"]}
    ]
    assert data["forbidden"] == [{"missing": ["admin"], "requests": 2 * M}]
    assert data["wrong_secret"] == 2 * W


def _rows(store: KeyStore, rows: list[tuple[str, int, int, int, str, int]]) -> None:
    source = credential_source(store.engine, clock=store.clock)
    source.record_usage(rows)
    source.close()


def test_a_flush_writes_every_value_as_given(keys: KeyStore, clock: FakeClock) -> None:
    """Scope text with a tab, newline, backslash, `\\N`, quotes or non-ASCII, and counts past
    2**31, are stored exactly (PostgreSQL's flush is a COPY, whose text format escapes these)."""
    created = keys.create_key("alice", "svc", ["project"])
    pid, now = created.info.public_id, usage_minute(clock())
    odd = ["a\tb", "line\nnext", "back\\slash", "\\N", "'quote\" é ✓", ""]
    rows = [(pid, now - i, MINUTE, 1, scope, 2**33 + i) for i, scope in enumerate(odd)]
    _rows(keys, rows)
    with keys.engine.connect() as conn:
        stored = conn.execute(
            text("SELECT public_id, minute, span, kind, scope, requests FROM apikey_tui_usage")
        ).all()
    assert sorted(tuple(r) for r in stored) == sorted(rows)


def test_flushes_of_any_size_write_every_row_with_two_sqlite_statements(
    sqlite_url: str, clock: FakeClock
) -> None:
    """Flushes of 1 to 1,203 rows are written whole with at most two distinct INSERTs (full
    chunks and a row at a time), not one a remainder's length: SQLite's driver keeps each
    distinct one prepared, ~0.6 KB a row, for the process's life (it kept one per flush)."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP, actor=ACTOR, clock=clock)
    pid, now = store.create_key("alice", "svc", ["project"]).info.public_id, usage_minute(clock())
    inserts: set[str] = set()

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "apikey_tui_usage " in statement and statement.startswith("INSERT"):
            inserts.add(statement)

    source = credential_source(store.engine, clock=clock)
    event.listen(source.engine, "before_cursor_execute", seen)
    written = 0
    for size in (1, 7, 499, 500, 501, 1203):
        source.record_usage(
            [(pid, now - written - i, MINUTE, 1, "project", 1) for i in range(size)]
        )
        written += size
    source.close()
    with store.engine.connect() as conn:
        stored = conn.execute(text("SELECT count(*), sum(requests) FROM apikey_tui_usage")).one()
    store.close()
    assert tuple(stored) == (written, written)
    assert len(inserts) == 2


def test_compaction_keeps_every_answer(keys: KeyStore, clock: FakeClock) -> None:
    """Reports, overview and proposals read the same before and after `compact`."""
    created = keys.create_key("alice", "svc", ["project", "serving"])
    clock.advance(timedelta(days=90))
    pid, now = created.info.public_id, usage_minute(clock())
    rows = []
    for minutes_ago in range(0, 60 * 24 * 70, 97):  # 70 days, every 97 minutes
        minute = now - minutes_ago
        rows.append((pid, minute, MINUTE, USAGE_ALLOWED, "", 2))
        rows.append((pid, minute, MINUTE, USAGE_ALLOWED, "project", 2))
        rows.append((pid, minute, MINUTE, USAGE_ALLOWED, "project serving", 1))
        rows.append((pid, minute, MINUTE, 1, "admin", 1))
        rows.append((pid, minute, MINUTE, 2, "", 1))
    _rows(keys, rows)

    def answers() -> tuple[Any, ...]:
        return (
            keys.key_usage("alice", "svc"),
            keys.key_usage("alice", "svc", timedelta(days=60)),
            keys.key_usage("alice", "svc", timedelta(days=3)),
            keys.usage_overview(),
            keys.usage_overview(timedelta(days=45)),
            keys.rightsize(),
        )

    before = answers()
    done = keys.compact_usage()
    assert done.into_hours > 0 and done.into_days > 0 and done.expired == 0
    assert answers() == before
    assert keys.compact_usage() == type(done)(0, 0, 0)  # a second run finds nothing to do
    with keys.engine.connect() as conn:
        spans = set(conn.execute(text("SELECT DISTINCT span FROM apikey_tui_usage")).scalars())
    assert spans == {MINUTE, HOUR, DAY}
    first = usage_minute(before[0].since)
    windowed = [r for r in rows if r[3] == USAGE_ALLOWED and r[1] >= first]
    assert before[0].requests == sum(r[5] for r in windowed)
    assert [s.requests for s in before[0].scopes] == [3 * len(windowed) // 3, len(windowed) // 3]


def test_compaction_deletes_what_is_past_the_retention(keys: KeyStore, clock: FakeClock) -> None:
    """Rows older than the retention are deleted; younger ones stay."""
    created = keys.create_key("alice", "svc", ["project"])
    now = usage_minute(clock())
    pid = created.info.public_id
    _rows(keys, [(pid, now - 60 * 24 * 20, MINUTE, 0, "", 5), (pid, now, MINUTE, 0, "", 1)])
    assert keys.compact_usage(timedelta(days=10)).expired == 1
    assert keys.key_usage("alice", "svc", timedelta(days=30)).requests == 1


def test_rightsize_proposes_for_old_keys_only_and_applies_with_an_event(
    database_url: str, keys: KeyStore, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """An old key never using 'serving' is proposed to drop it; a young one is not; --apply
    narrows the key and writes one key.rightsize event naming the scope."""
    old = keys.create_key("alice", "old", ["project", "serving"])
    clock.advance(timedelta(days=40))
    young = keys.create_key("alice", "young", ["project", "serving"])
    verifier = Verifier.from_url(database_url, hasher=CHEAP, clock=clock)
    for created in (old, young):
        verifier.verify("ApiKey " + created.plaintext, ("project",))
        with pytest.raises(InsufficientScopeError):
            verifier.verify("ApiKey " + created.plaintext, ("admin",))
    verifier.close()
    found = keys.rightsize(owner="alice")
    assert [(p.info.name, p.drop, p.keep, p.would_refuse) for p in found.proposals] == [
        ("old", ("serving",), ("project",), 0)
    ]
    assert [(r.info.name, r.missing[0].missing) for r in found.refused] == [
        ("old", ("admin",)),
        ("young", ("admin",)),
    ]
    proposal = found.proposals[0]
    narrowed = keys.apply_proposal(proposal, timedelta(days=30))
    assert narrowed.scopes == ("project",)
    event = keys.events(1)[0]
    assert (event.action, event.key_name) == ("key.rightsize", "old")
    assert event.detail.startswith("removed: serving")
    assert keys.rightsize(owner="alice").proposals == ()


def test_the_views_first_proposals_are_the_first_of_every_proposal_at_any_page_size(
    keys: KeyStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view's first N proposals are rightsize's first N, for every N, owner and page size,
    before and after compaction: used through a previous id, held scopes all used, one scope,
    unused, only refused, young keys and another owner's key each count as rightsize says."""
    held = ["project", "serving"]
    made = {n: keys.create_key("alice", n, held) for n in ("a", "b", "d", "e", "f")}
    made["c"] = keys.create_key("alice", "c", ["project"])
    made["g"] = keys.create_key("alice", "g", ["admin", *held])
    made["bob"] = keys.create_key("bob", "a", held)
    keys.rotate_key("alice", "e", grace=timedelta(hours=1))
    old_e = made["e"].info.public_id
    clock.advance(timedelta(days=40))
    made["young"] = keys.create_key("alice", "h", held)
    uses = {
        "a": (0, "project"),
        "b": (0, "project serving"),
        "c": (0, "project"),
        "f": (1, "serving"),
        "g": (0, "admin"),
        "bob": (0, "serving"),
        "young": (0, "project"),
    }
    now = usage_minute(clock())
    rows = [
        (made[n].info.public_id, now - ago, MINUTE, kind, scope, 1)
        for n, (kind, scope) in uses.items()
        for ago in (0, 60 * 24 * 3)  # today, and three days ago (compaction makes it an hour)
    ]
    rows.append((old_e, now, MINUTE, 0, "serving", 4))  # the rotated key, under its old id
    _rows(keys, rows)
    expected = [("alice", "a"), ("alice", "e"), ("alice", "g"), ("bob", "a")]
    for compacted in (False, True):
        if compacted:
            assert keys.compact_usage().into_hours > 0
        every = keys.rightsize().proposals
        assert [(p.info.owner, p.info.name) for p in every] == expected
        for page in (1, 2, 500):
            monkeypatch.setattr(rightsizing, "PAGE", page)
            for n in range(len(every) + 2):
                assert keys.proposals(limit=n) == every[:n]
            assert keys.proposals(owner="bob", limit=5) == keys.rightsize(owner="bob").proposals


def test_rightsize_cli_prints_nothing_without_proposals_and_applies_with_yes(
    database_url: str, keys: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """`keys rightsize` on keys with nothing to propose prints nothing and exits 0 (cron); its
    JSON has the issue's shape."""
    keys.create_key("alice", "svc", ["project"])
    args = ["--database-url", database_url, "--owner", "alice", "keys", "rightsize"]
    assert main(args) == 0
    assert capsys.readouterr().out == ""
    assert main([*args, "--json", "--apply", "--yes"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "proposals": [],
        "refused": [],
        "applied": False,
    }


def test_db_compact_cli_is_quiet_when_there_is_nothing_to_do(
    database_url: str, keys: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """`db compact` under cron says nothing when nothing changed, and its JSON counts rows."""
    assert main(["--database-url", database_url, "db", "compact"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["--database-url", database_url, "db", "compact", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["into_hours"] == 0


@pytest.mark.slow
def test_two_writers_and_compaction_at_once_lose_no_count(
    database_url: str, admin: KeyStore
) -> None:
    """Two processes append old minutes while `compact` runs again and again: the sum is exact."""
    created = admin.create_key("alice", "svc", ["project"])
    rounds = 150
    old = usage_minute(admin.clock()) - 3 * 24 * 60  # past 48 h: compacted as it arrives
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(
            target=usage_workers.append,
            args=(database_url, created.info.public_id, rounds, old),
        )
        for _ in "ab"
    ]
    for worker in workers:
        worker.start()
    compactions = 0
    while any(w.is_alive() for w in workers):
        admin.compact_usage()
        compactions += 1
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    admin.compact_usage()
    assert compactions > 1
    assert admin.key_usage("alice", "svc", timedelta(days=5)).requests == 2 * rounds


@pytest.mark.time_dependent
def test_rightsize_cli_applies_with_yes_and_usage_prints_a_sparkline(
    database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`keys rightsize --apply --yes --json` narrows a key made 40 days ago that never used
    'serving' and says so; `keys usage` prints each scope and a per-day sparkline."""
    past = FakeClock(system_clock() - timedelta(days=40))
    store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR, clock=past)
    created = store.create_key("alice", "svc", ["project", "serving"])
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    verifier.verify("ApiKey " + created.plaintext, ("project",))
    verifier.close()
    args = ["--database-url", database_url, "--owner", "alice", "keys"]
    assert main([*args, "rightsize", "--apply", "--yes", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["applied"] is True
    assert data["proposals"] == [
        {
            "owner": "alice",
            "name": "svc",
            "public_id": created.info.public_id,
            "drop": ["serving"],
            "keep": ["project"],
            "would_refuse": 0,
        }
    ]
    assert store.get_key("alice", "svc").scopes == ("project",)
    assert [e.action for e in store.events(5)].count("key.rightsize") == 1
    assert main([*args, "usage", "svc"]) == 0
    out = capsys.readouterr().out
    assert "project" in out and "per day: " in out and "wrong secrets: 0" in out
    store.close()


def test_prometheus_exposes_usage_counts_and_flush_time(database_url: str, admin: KeyStore) -> None:
    """The collector shows requests recorded, flushed and dropped, and the flush histogram."""
    from prometheus_client import CollectorRegistry

    from apikey_tui.integrations.prometheus import register

    created = admin.create_key("alice", "svc", ["project"])
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    registry = CollectorRegistry()
    register(verifier, registry)
    _use(verifier, created.plaintext, 4, 1, 1)
    verifier.flush()

    def sample(name: str) -> float | None:
        return registry.get_sample_value(f"apikey_tui_verifier_{name}")

    assert (sample("usage_recorded_total"), sample("usage_flushed_total")) == (6, 6)
    assert sample("usage_dropped_total") == 0
    assert sample("usage_flush_seconds_count") == 1
    verifier.close()


# --- review of the tallies (issue 18's usage counters) -----------------------------------------


def test_a_request_that_just_made_its_tally_is_counted_though_two_readings_pass(
    database_url: str, keys: KeyStore, clock: FakeClock
) -> None:
    """A request whose thread made a tally and is paused before advancing it, while another
    key crowds the limit and the writer reads twice, is still written (or counted as dropped)."""
    a = keys.create_key("alice", "a", ["project"])
    b = keys.create_key("alice", "b", ["project"])
    c = keys.create_key("alice", "c", ["project"])
    verifier = Verifier.from_url(database_url, hasher=CHEAP, clock=clock, usage_limit=1)
    uses = verifier._uses

    def check(created: Any) -> None:
        verifier.verify("ApiKey " + created.plaintext, ("project",))

    check(a)
    verifier.flush()
    check(b)  # no room: noted, and a's idle tally gives its place at the next reading
    verifier.flush()
    made = uses._tally
    paused = False

    def made_then_paused(public_id: str, spelling: Any) -> Any:
        """What other threads do while this one waits for the GIL before `next(counter)`."""
        nonlocal paused
        counter = made(public_id, spelling)
        if not paused:
            paused = True
            check(c)  # no room (b's new tally holds it): crowded
            verifier.flush()  # the writer's readings: b's tally, still 0, looks idle
            verifier.flush()
        return counter

    uses._tally = made_then_paused  # type: ignore[method-assign]
    check(b)
    verifier.close()
    requests = [keys.key_usage("alice", name).requests for name in "abc"]
    dropped = verifier.stats.snapshot()["usage_dropped"]
    # b's two are written; c's one found no count free (limit 1, b's took it): dropped, counted
    assert (requests, dropped) == ([1, 2, 0], 1)


def test_spellings_stay_within_the_limit_while_it_is_full(
    database_url: str, keys: KeyStore, clock: FakeClock
) -> None:
    """With every tally taken, each new spelling of the required scopes leaves nothing behind
    (the code says "spellings stay within the limit too"): no empty dict, no text per spelling."""
    from itertools import permutations

    a = keys.create_key("alice", "a", ["project", "serving", "admin"])
    verifier = Verifier.from_url(database_url, hasher=CHEAP, clock=clock, usage_limit=1)
    header = "ApiKey " + a.plaintext
    spellings = [p for n in (1, 2, 3) for p in permutations(("project", "serving", "admin"), n)]
    for spelling in spellings:  # 15 spellings (FastAPI's lists, DRF's sets, in any order)
        verifier.verify(header, list(spelling))
    uses = verifier._uses
    assert (len(uses.tallies), len(uses._texts)) == (1, 1)
    verifier.close()
    dropped = verifier.stats.snapshot()["usage_dropped"]  # distinct counts are bounded too
    assert keys.key_usage("alice", "a").requests + dropped == len(spellings)
    assert (len(uses.tallies), len(uses._texts)) == (0, 0)  # the last reading freed them


def test_recreate_and_rotate_keep_the_keys_usage_and_show_the_old_secrets_as_such(
    database_url: str, admin: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """A leaked key's N, M, W survive `recreate` and a rotation: in its report, per secret (the
    old one as "old secret"), `keys usage` and its JSON, the Usage view, the day column and the
    refusals right-sizing names."""
    first = admin.create_key("alice", "svc", ["project", "serving"])
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    _use(verifier, first.plaintext)
    verifier.close()
    second = admin.recreate_key("alice", "svc")
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    _use(verifier, second.plaintext, 1, 0, 0)
    verifier.close()
    third = admin.rotate_key("alice", "svc", grace=timedelta(hours=1))
    old_id, mid_id, new_id = (c.info.public_id for c in (first, second, third))

    report = admin.key_usage("alice", "svc")
    assert (report.requests, report.wrong_secret) == (N + 1, W)
    assert [(f.missing, f.requests) for f in report.forbidden] == [(("admin",), M)]
    assert [
        (s.public_id, s.old, s.requests, s.forbidden, s.wrong_secret) for s in report.secrets
    ] == [
        (new_id, False, 0, 0, 0),
        (mid_id, True, 1, 0, 0),
        (old_id, True, N, M, W),
    ]
    data = _usage_json(database_url, capsys, "svc")
    assert (data["requests"], data["wrong_secret"]) == (N + 1, W)
    assert [
        (s["public_id"], s["secret"], s["requests"], s["forbidden"]) for s in data["secrets"]
    ] == [
        (new_id, "current", 0, 0),
        (mid_id, "old", 1, 0),
        (old_id, "old", N, M),
    ]
    assert main(["--database-url", database_url, "--owner", "alice", "keys", "usage", "svc"]) == 0
    text_out = capsys.readouterr().out
    assert f"old secret {old_id} (replaced " in text_out
    assert f"{N} requests, {M} refused (403), {W} wrong secrets" in text_out

    for owner in (None, "alice"):
        view = admin.usage_overview(owner=owner)
        for listed in (view.busiest, view.forbidden, view.wrong_secret):
            assert [
                (a.public_id, a.allowed, a.forbidden, a.wrong_secret, a.old_allowed) for a in listed
            ] == [(new_id, N + 1, M, W, N + 1)]
        assert [(m.missing, m.requests) for m in view.forbidden[0].missing] == [(("admin",), M)]
    assert sum(admin.daily_requests([new_id], 3)[new_id]) == N + 1
    refused = admin.rightsize(owner="alice", name="svc").refused
    assert [(r.info.public_id, [(m.missing, m.requests) for m in r.missing]) for r in refused] == [
        (new_id, [(("admin",), M)])
    ]
    admin.delete_key("alice", "svc")  # the key's ids go with it: its counts name no key
    assert admin.usage_overview().busiest == ()


def test_rightsizing_reads_the_use_of_a_secret_the_key_no_longer_names(
    keys: KeyStore, clock: FakeClock
) -> None:
    """A key used only through its previous secret, whose grace was ended since, is proposed
    for narrowing to the scope it used: the old secret's use is the key's."""
    created = keys.create_key("alice", "svc", ["project", "serving"])
    rotated = keys.rotate_key("alice", "svc", grace=timedelta(days=10))
    clock.advance(timedelta(days=5))
    _rows(keys, [(created.info.public_id, usage_minute(clock()), MINUTE, 0, "project", 4)])
    keys.end_grace("alice", "svc")
    clock.advance(timedelta(days=26))  # the key (rotated 31 days ago) is older than the window
    [proposal] = keys.rightsize(owner="alice").proposals
    assert (proposal.info.public_id, proposal.drop, proposal.keep) == (
        rotated.info.public_id,
        ("serving",),
        ("project",),
    )
    assert [p.drop for p in keys.proposals(owner="alice")] == [("serving",)]
    assert keys.key_usage("alice", "svc").scopes[0].requests == 4


def test_a_flush_whose_answer_is_lost_is_written_once(
    database_url: str, keys: KeyStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush that commits but whose answer is lost (raised after the commit) is retried and
    found written: 1,000 requests are recorded as 1,000, not 2,000."""
    created = keys.create_key("alice", "svc", ["project"])
    real = CredentialReads.record_usage
    answers: list[str] = []

    def commit_then_lose_the_answer(self: CredentialReads, *args: Any) -> None:
        real(self, *args)  # the transaction commits
        if not answers:
            answers.append("lost")
            raise StoreUnavailableError("the connection dropped before the commit's answer")

    monkeypatch.setattr(CredentialReads, "record_usage", commit_then_lose_the_answer)
    verifier = Verifier.from_url(database_url, hasher=CHEAP, clock=clock)
    for _ in range(1000):
        verifier.verify("ApiKey " + created.plaintext, ("project",))
    verifier.flush()  # committed, but the verifier hears of a failure
    assert answers == ["lost"]
    verifier.verify("ApiKey " + created.plaintext, ("project",))
    verifier.close()  # retries the lost batch, then writes the one request since
    assert keys.key_usage("alice", "svc").requests == 1001
    stats = verifier.stats.snapshot()
    assert (stats["usage_flushed"], stats["usage_dropped"]) == (1001, 0)
    with keys.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM apikey_tui_usage_batch")).scalar_one() == 2


def test_compaction_prunes_old_flush_marks(keys: KeyStore, clock: FakeClock) -> None:
    """`compact` deletes the marks of flushes older than a week, and keeps the newer ones."""
    source = credential_source(keys.engine, clock=clock)
    created = keys.create_key("alice", "svc", ["project"])
    row = (created.info.public_id, usage_minute(clock()), MINUTE, 0, "", 1)
    source.record_usage([row], "a" * 32)
    clock.advance(timedelta(days=8))
    source.record_usage([row], "b" * 32)
    source.record_usage([row], "b" * 32)  # a retry: written once
    source.close()
    keys.compact_usage()
    with keys.engine.connect() as conn:
        marks = conn.execute(text("SELECT id FROM apikey_tui_usage_batch")).scalars().all()
    assert marks == ["b" * 32]
    assert keys.key_usage("alice", "svc", timedelta(days=30)).requests == 2
