"""Expiries, graces and the lifetime policy stay within 100 years of now: a request beyond is
refused in one line, a value stored beyond (raw SQL, an older release) is read as the bound, and
no date arithmetic ends in an OverflowError."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from apikey_tui import keyformat
from apikey_tui.cli import main
from apikey_tui.clock import system_clock
from apikey_tui.db.models import KeyRow, SchemaInfo
from apikey_tui.errors import ApiKeyError, InvalidInputError
from apikey_tui.names import DURATION_MAX, parse_expiry
from apikey_tui.store import POLICY_KEY, KeyStore
from tests.conftest import ACTOR, CHEAP, FakeClock

SECOND = timedelta(seconds=1)
FAR = datetime(
    9999, 12, 31, 23, 59, 59, tzinfo=UTC
)  # the issue's `set-expiry NAME 9999-12-31T23:59:59Z`


@pytest.fixture
def lstore(database_url: str, clock: FakeClock) -> Iterator[KeyStore]:
    """A KeyStore on a fresh database (SQLite, then PostgreSQL) that reads the fake clock."""
    key_store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR, clock=clock)
    yield key_store
    key_store.close()


def _write_key(store: KeyStore, **values: Any) -> None:
    """Change every key row behind the store's back, as raw SQL or an older release could."""
    with store.engine.begin() as conn:
        conn.execute(sa.update(KeyRow.__table__).values(**values))  # type: ignore[attr-defined]


def _write_policy(store: KeyStore, value: str) -> None:
    with store.engine.begin() as conn:
        table = SchemaInfo.__table__  # type: ignore[attr-defined]
        conn.execute(sa.delete(table).where(table.c.key == POLICY_KEY))
        conn.execute(sa.insert(table).values(key=POLICY_KEY, value=value))


# --- requests beyond the bound --------------------------------------------------------------------


def test_an_expiry_more_than_100_years_away_is_refused(lstore: KeyStore, clock: FakeClock) -> None:
    """create, set_expiry and rotate refuse a moment or span past 36500d from now in one line,
    as a duration that long is refused; 36500d itself is allowed."""
    for expires in (FAR, clock() + DURATION_MAX + SECOND, timedelta(days=999_999_999)):
        with pytest.raises(InvalidInputError, match="100 years") as info:
            lstore.create_key("alice", "far", ["project"], expires=expires)
        assert "\n" not in str(info.value)
    created = lstore.create_key("alice", "ci", ["project"], expires=clock() + DURATION_MAX)
    assert created.info.expires_at == clock() + DURATION_MAX
    with pytest.raises(InvalidInputError, match="100 years"):
        lstore.set_expiry("alice", "ci", FAR)
    with pytest.raises(InvalidInputError, match="100 years"):
        lstore.rotate_key("alice", "ci", grace=timedelta(hours=1), expires=FAR)
    with pytest.raises(InvalidInputError, match="100 years"):
        lstore.rotate_key("alice", "ci", grace=timedelta(days=999_999_999))
    assert [e.action for e in lstore.events()] == ["key.create"]


def test_spans_past_the_bound_are_refused_by_the_store_too(lstore: KeyStore) -> None:
    """A policy, --expiring or --unused span past 36500d given to the store directly (not through
    parse_duration) is refused in one line, never an OverflowError."""
    huge = timedelta(days=999_999_999)
    with pytest.raises(InvalidInputError, match="100 years"):
        lstore.set_lifetime_policy(huge)
    with pytest.raises(InvalidInputError, match="100 years"):
        lstore.list_keys(expiring_within=huge)
    with pytest.raises(InvalidInputError, match="100 years"):
        lstore.list_keys(unused_for=huge)
    assert lstore.lifetime_policy() is None


@pytest.mark.parametrize(
    "text", ["0001-01-01T00:00+14:00", "9999-12-31T23:00-05:00", "0001-01-01T00:00:00+23:59"]
)
def test_a_moment_that_utc_cannot_hold_is_refused_in_one_line(text: str) -> None:
    """An ISO moment whose offset pushes it past year 1 or 9999 in UTC is a bad expiry, not an
    OverflowError."""
    with pytest.raises(InvalidInputError, match="out of range") as info:
        parse_expiry(text)
    assert "\n" not in str(info.value)


# --- values stored beyond the bound ---------------------------------------------------------------


def test_a_stored_expiry_in_year_9999_is_read_as_100_years_when_rotating(
    lstore: KeyStore, clock: FakeClock
) -> None:
    """A key whose stored expiry is 9999-12-31 lists, shows and verifies; rotating it a day later
    (the issue's OverflowError) gives the new secret 36500d and the old one the grace asked."""
    first = lstore.create_key("alice", "ci", ["project"])
    _write_key(lstore, expires_at=FAR)
    clock.advance(timedelta(days=1))
    assert lstore.get_key("alice", "ci").expires_at == FAR
    assert [k.name for k in lstore.list_keys("alice")] == ["ci"]
    assert lstore.list_keys("alice", expiring_within=DURATION_MAX) == []
    assert lstore.credential(first.info.public_id) is not None
    rotated = lstore.rotate_key("alice", "ci", grace=timedelta(hours=1))
    assert rotated.info.expires_at == clock() + DURATION_MAX
    assert rotated.info.grace_until == clock() + timedelta(hours=1)
    _write_key(lstore, expires_at=FAR)
    clock.advance(timedelta(days=1))
    assert lstore.recreate_key("alice", "ci").info.expires_at == clock() + DURATION_MAX


def test_a_stored_policy_beyond_the_bound_counts_as_100_years(
    lstore: KeyStore, clock: FakeClock
) -> None:
    """A max-lifetime of 10^15 seconds written by raw SQL (past what timedelta holds) reads as
    36500d: policy, create and rotate work."""
    _write_policy(lstore, "1000000000000000")
    assert lstore.lifetime_policy() == DURATION_MAX
    created = lstore.create_key("alice", "ci", ["project"])
    assert created.info.expires_at == clock() + DURATION_MAX
    clock.advance(timedelta(days=1))
    assert lstore.rotate_key("alice", "ci", grace=timedelta(0)).info.expires_at == (
        clock() + DURATION_MAX
    )


@pytest.mark.parametrize("value", ["abc", "-5", "0", ""])
def test_a_stored_policy_that_is_no_positive_number_is_refused_in_one_line(
    lstore: KeyStore, value: str
) -> None:
    """A max-lifetime row that is not a positive number of seconds is refused in one line that
    says how to set it again, and `policy set` still repairs it."""
    _write_policy(lstore, value)
    with pytest.raises(ApiKeyError, match="policy set max-lifetime") as info:
        lstore.create_key("alice", "ci", ["project"])
    assert "\n" not in str(info.value)
    lstore.set_lifetime_policy(timedelta(days=30))
    assert lstore.lifetime_policy() == timedelta(days=30)


# --- the command line (real clock: the CLI opens its own store) -----------------------------------


def _cli(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--database-url", url, "--owner", "alice", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _far_date() -> str:
    """A date just over 100 years from today (computed, never pinned)."""
    return (system_clock() + DURATION_MAX + timedelta(days=2)).date().isoformat()


@pytest.mark.parametrize(
    "args",
    [
        ["keys", "set-expiry", "ci", "9999-12-31T23:59:59Z"],
        ["keys", "set-expiry", "ci", "FAR"],
        ["keys", "create", "x", "--scope", "project", "--expires", "9999-12-31"],
        ["keys", "rotate", "ci", "--grace", "1h", "--expires", "FAR"],
        ["keys", "set-expiry", "ci", "0001-01-01T00:00+14:00"],
        ["keys", "create", "x", "--scope", "project", "--expires", "9999-12-31T23:00-05:00"],
    ],
)
def test_cli_an_expiry_past_100_years_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, args: list[str]
) -> None:
    """A date more than 100 years away, or one UTC cannot hold, exits 2 with one line (as a
    duration over 36500d does) and changes nothing."""
    assert _cli(capsys, sqlite_url, "keys", "create", "ci", "--scope", "project")[0] == 0
    args = [_far_date() if a == "FAR" else a for a in args]
    with pytest.raises(SystemExit) as info:
        main(["--database-url", sqlite_url, "--owner", "alice", *args])
    out, err = capsys.readouterr()
    assert (info.value.code, out) == (2, "") and err.count("\n") == 1, err
    assert "100 years" in err or "out of range" in err
    _, out, _ = _cli(capsys, sqlite_url, "events", "--json")
    assert [e["action"] for e in json.loads(out)] == ["key.create"]


def test_cli_rotate_list_and_show_a_key_stored_with_expiry_9999(
    capsys: pytest.CaptureFixture[str], database_url: str
) -> None:
    """The issue's case through the CLI: a key created a day ago whose stored expiry is
    9999-12-31T23:59:59Z shows, lists and rotates (exit 0, a new key on stdout)."""
    store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR)
    try:
        store.create_key("alice", "ci", ["project"])
        _write_key(store, expires_at=FAR, created_at=system_clock() - timedelta(days=1))
    finally:
        store.close()
    code, out, _ = _cli(capsys, database_url, "keys", "show", "ci")
    assert code == 0 and "9999-12-31 23:59:59 UTC" in out
    code, out, _ = _cli(capsys, database_url, "keys", "list", "--json")
    assert code == 0 and json.loads(out)[0]["expires_at"] == "9999-12-31T23:59:59+00:00"
    code, out, err = _cli(capsys, database_url, "keys", "rotate", "ci", "--grace", "1h")
    assert code == 0 and keyformat.parse(out.strip()) and "Traceback" not in err
