"""The PostgreSQL connections we open: their names in pg_stat_activity and statement preparing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import text

from apikey_tui.db import (
    ADMIN_APPLICATION,
    LISTENER_APPLICATION,
    VERIFIER_APPLICATION,
    make_engine,
)
from apikey_tui.errors import DatabaseUrlError
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from tests.conftest import CHEAP, eventually
from tests.test_push_revocation import LONG_BOUND, SHARED, SHARED_URL, listening
from tests.test_verifier import header


@pytest.fixture
def fresh_database(postgres_server: str) -> Iterator[str]:
    """A new database on the shared server (only this test connects to it), dropped after."""
    name = f"apikey_conn_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(SHARED, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield SHARED_URL.set(drivername="postgresql+psycopg", database=name).render_as_string(
            hide_password=False
        )
    finally:
        with psycopg.connect(SHARED, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def application_names(url: str) -> set[str]:
    """The application_name of every session connected to url's database right now."""
    database = url.rsplit("/", 1)[1].split("?")[0]
    with psycopg.connect(SHARED, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT application_name FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchall()
    return {row[0] for row in rows}


def admin_verifier_and_listener(url: str) -> tuple[KeyStore, Verifier]:
    """An admin's store and a verifier that has checked a key and is listening for changes."""
    store = KeyStore.open(url, hasher=CHEAP)
    key = store.create_key("alice", "demo", ["project"]).plaintext
    checker = Verifier.from_url(url, hasher=CHEAP, revocation_bound=LONG_BOUND)
    assert checker.verify(header(key)).key_name == "demo"
    assert eventually(lambda: listening(checker))
    return store, checker


def test_each_connection_says_in_pg_stat_activity_what_opened_it(fresh_database: str) -> None:
    """An admin's store, a verifier's pool and its listener each show their own name."""
    store, checker = admin_verifier_and_listener(fresh_database)
    assert application_names(fresh_database) == {
        ADMIN_APPLICATION,
        VERIFIER_APPLICATION,
        LISTENER_APPLICATION,
    }
    checker.close()
    store.close()


def test_the_urls_application_name_wins_on_every_connection(fresh_database: str) -> None:
    """?application_name= in the URL names the store's, the verifier's and the listener's."""
    url = f"{fresh_database}?application_name=billing-api"
    store, checker = admin_verifier_and_listener(url)
    assert application_names(fresh_database) == {"billing-api"}
    checker.close()
    store.close()


def prepared_after_repeats(url: str) -> int:
    """How many statements the server holds prepared after one session ran one query 10 times."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            for _ in range(10):
                conn.execute(text("SELECT 1"))
            count: int = conn.execute(text("SELECT count(*) FROM pg_prepared_statements")).one()[0]
    finally:
        engine.dispose()
    return count


def test_no_statement_is_prepared_unless_the_url_asks(postgres_url: str) -> None:
    """By default nothing is prepared (safe behind transaction pooling); the URL's
    prepare_threshold, a number or none, is what psycopg then uses."""
    assert prepared_after_repeats(postgres_url) == 0
    assert prepared_after_repeats(f"{postgres_url}&prepare_threshold=none") == 0
    assert prepared_after_repeats(f"{postgres_url}&prepare_threshold=0") >= 1
    assert prepared_after_repeats(f"{postgres_url}&prepare_threshold=5") >= 1


def test_a_verifier_with_prepare_threshold_in_its_url_checks_and_listens(
    postgres_url: str,
) -> None:
    """?prepare_threshold=0 is psycopg's, not libpq's: checks pass and the listener connects."""
    url = f"{postgres_url}&prepare_threshold=0"
    store, checker = admin_verifier_and_listener(url)
    checker.close()
    store.close()


@pytest.mark.parametrize("value", ["abc", "-1", "1.5"])
def test_a_prepare_threshold_that_is_not_a_number_or_none_is_refused(value: str) -> None:
    """A prepare_threshold psycopg could not use is an error in the URL, before connecting."""
    with pytest.raises(DatabaseUrlError, match="prepare_threshold"):
        make_engine(f"postgresql://postgres@127.0.0.1:1/x?prepare_threshold={value}")
