"""The rules about a secret, each said once: the grace predicate and its SQL twin, and whether a
secret works now (asked by the verifier's store port, the leak judge and the leak writer)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlmodel import select

from apikey_tui.store import KeyStore
from apikey_tui.store.records import KEY_TABLE, grace_sql, in_grace, secret_works
from tests.conftest import ACTOR, CHEAP, FakeClock


@pytest.fixture
def rotated(database_url: str, clock: FakeClock) -> Iterator[KeyStore]:
    """Keys on both backends: never rotated, rotated with a grace of one hour, rotated with a
    grace past the key's expiry, and rotated at once."""
    store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR, clock=clock)
    for name in ("plain", "hour", "short", "at-once"):
        store.create_key("alice", name, ["project"], expires=timedelta(days=1))
    store.rotate_key("alice", "hour", grace=timedelta(hours=1))
    store.rotate_key("alice", "short", grace=timedelta(days=3))  # cut at the key's expiry
    store.rotate_key("alice", "at-once", grace=timedelta(0))
    yield store
    store.close()


def test_the_grace_predicate_and_its_sql_twin_agree_at_every_edge(
    rotated: KeyStore, clock: FakeClock
) -> None:
    """in_grace (Python) and grace_sql (SQL) say the same of every key, before, at and after
    each grace's end, to the second."""
    start = clock.now
    ends = [start + timedelta(hours=1), start + timedelta(days=1)]
    moments = [start, *[end + timedelta(seconds=d) for end in ends for d in (-1, 0, 1)]]
    for moment in moments:
        clock.now = moment
        with rotated.session() as session:
            rows = session.exec(
                select(KEY_TABLE.c.name, KEY_TABLE.c.old_public_id, KEY_TABLE.c.grace_until)
            ).all()
            in_sql = set(session.exec(select(KEY_TABLE.c.name).where(grace_sql(moment))).all())
        in_python = {name for name, old, until in rows if in_grace(old, until, moment)}
        assert in_python == in_sql, moment - start
    clock.now = start
    assert {k.name for k in rotated.list_keys("alice") if k.old_public_id} == {"hour", "short"}


def test_a_secret_works_up_to_not_at_its_end_and_never_when_disabled(
    rotated: KeyStore, clock: FakeClock
) -> None:
    """secret_works at its edges; a previous secret's end is the grace's or the key's expiry,
    whichever comes first, as the store's credential says."""
    now = clock.now
    assert secret_works(False, None, now) and not secret_works(True, None, now)
    assert secret_works(False, now + timedelta(seconds=1), now)
    assert not secret_works(False, now, now)
    short = rotated.get_key("alice", "short")
    assert short.old_public_id is not None and short.expires_at is not None
    previous = rotated.credential(short.old_public_id)
    assert previous is not None and previous.expires_at == short.expires_at
    clock.now = short.expires_at - timedelta(seconds=1)
    assert previous.works(clock.now)
    clock.now = short.expires_at
    assert not previous.works(clock.now)
