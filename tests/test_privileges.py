"""Least privilege for services: `apikey-tui db grant-verifier` on the real PostgreSQL.

Each test makes its own LOGIN role (trust auth, as the test server is set up) and drops it.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from psycopg import errors
from sqlalchemy.engine import make_url

from apikey_tui import SCHEMA_VERSION
from apikey_tui.cli import main
from apikey_tui.db import make_engine, upgrade_schema
from apikey_tui.db.schema import alembic_config, excess_privileges
from apikey_tui.hashing import SecretHasher
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from tests.conftest import ACTOR, CHEAP
from tests.test_proxies import Process
from tests.throwaway_postgres import free_port


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture
def role(postgres_url: str) -> Iterator[str]:
    """A fresh LOGIN role with no rights, dropped (with whatever it was granted) afterwards."""
    name = f"verifier_{uuid.uuid4().hex[:10]}"
    server = _libpq(postgres_url).split("?")[0]
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {name} LOGIN".encode())
    yield name
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {name}".encode())  # the grants, in this database
        conn.execute(f"DROP ROLE {name}".encode())


@pytest.fixture
def admin_store(postgres_url: str) -> Iterator[KeyStore]:
    """The admins' store on the test's schema (the cheapest hash profile)."""
    store = KeyStore.open(postgres_url, hasher=CHEAP, actor=ACTOR)
    yield store
    store.close()


def _as(role: str, url: str) -> str:
    """The same database and schema, connecting as another role (trust auth, no password)."""
    return make_url(url).set(username=role, password=None).render_as_string(hide_password=False)


def _down_and_up(url: str, version: int) -> None:
    """Take the database back to schema `version` (what came after goes, with the grants a
    role had on it), then `db upgrade` it to this release's."""
    from alembic import command

    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            command.downgrade(alembic_config(conn), f"{version:04d}")
        assert upgrade_schema(engine)[:2] == (version, SCHEMA_VERSION)
    finally:
        engine.dispose()


def _grant(capsys: pytest.CaptureFixture[str], url: str, role: str) -> tuple[int, str, str]:
    code = main(["--database-url", url, "db", "grant-verifier", role, "--apply"])
    out, err = capsys.readouterr()
    return code, out, err


def test_granted_role_verifies_and_records_use(
    postgres_url: str, role: str, admin_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """A role given only the printed grants verifies a key and writes its last-used time."""
    created = admin_store.create_key("alice", "svc", ["project"])
    code, out, err = _grant(capsys, postgres_url, role)
    assert code == 0 and "Granted to" in err and "warning" not in err
    assert out.count("GRANT ") == 5 and "UPDATE (last_used_at) ON TABLE" in out
    verifier = Verifier.from_url(_as(role, postgres_url), hasher=CHEAP)
    try:
        caller = verifier.verify("ApiKey " + created.plaintext, ["project"])
        assert (caller.owner, caller.key_name) == ("alice", "svc")
        verifier.flush()
    finally:
        verifier.close()
    used = admin_store.get_key("alice", "svc").last_used_at
    assert used is not None and used <= datetime.now(UTC)


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO apikey_tui_key (owner, name, public_id, secret_hash, created_at)"
        " VALUES ('mallory', 'planted', 'akplanted', 'x', now())",
        "UPDATE apikey_tui_key SET secret_hash = 'x'",
        "UPDATE apikey_tui_key SET fingerprint = '0000000000000000'",
        "INSERT INTO apikey_tui_key_scope (key_id, scope) SELECT id, 'serving' FROM apikey_tui_key",
        "DELETE FROM apikey_tui_event",
    ],
)
def test_granted_role_cannot_plant_keys_or_hashes(
    postgres_url: str,
    role: str,
    admin_store: KeyStore,
    capsys: pytest.CaptureFixture[str],
    statement: str,
) -> None:
    """The verifier role cannot add a key, change a hash, fingerprint or scope, or erase events."""
    admin_store.create_key("alice", "svc", ["project"])
    assert _grant(capsys, postgres_url, role)[0] == 0
    with (
        psycopg.connect(_libpq(_as(role, postgres_url))) as conn,
        pytest.raises(errors.InsufficientPrivilege),
    ):
        conn.execute(statement.encode())


def test_granted_role_skips_a_needed_hash_upgrade_and_still_verifies(
    postgres_url: str, role: str, admin_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key hashed with an older profile verifies under the role; the hash stays as it was."""
    created = admin_store.create_key("alice", "old-hash", ["project"])  # the cheapest profile
    before = admin_store.credential(created.info.public_id)
    assert _grant(capsys, postgres_url, role)[0] == 0
    verifier = Verifier.from_url(_as(role, postgres_url), hasher=SecretHasher("key-secret-v1"))
    try:
        assert verifier.verify("ApiKey " + created.plaintext).key_name == "old-hash"
    finally:
        verifier.close()
    after = admin_store.credential(created.info.public_id)
    assert before is not None and after is not None and after.secret_hash == before.secret_hash


def test_grant_without_apply_prints_the_sql_and_changes_nothing(
    postgres_url: str, role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --apply the grants are printed for a DBA, quoted, and the role gets nothing."""
    KeyStore.open(postgres_url, hasher=CHEAP).close()
    schema = postgres_url.rsplit("%3D", 1)[1]
    assert main(["--database-url", postgres_url, "db", "grant-verifier", role]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [
        f"GRANT USAGE ON SCHEMA {schema} TO {role};",
        f"GRANT SELECT ON TABLE {schema}.apikey_tui_key, {schema}.apikey_tui_key_scope, "
        f"{schema}.apikey_tui_owner_limit, {schema}.apikey_tui_owner_network, "
        f"{schema}.apikey_tui_change, "
        f"{schema}.apikey_tui_meta, {schema}.apikey_tui_alembic_version TO {role};",
        f"GRANT UPDATE (last_used_at) ON TABLE {schema}.apikey_tui_key TO {role};",
        f"GRANT INSERT ON TABLE {schema}.apikey_tui_usage, {schema}.apikey_tui_usage_batch "
        f"TO {role};",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE {schema}.apikey_tui_limit_count, "
        f"{schema}.apikey_tui_limit_boot TO {role};",
    ]
    with (
        psycopg.connect(_libpq(_as(role, postgres_url))) as conn,
        pytest.raises(errors.InsufficientPrivilege),
    ):
        conn.execute(f"SELECT count(*) FROM {schema}.apikey_tui_key".encode())  # noqa: S608


def test_role_with_more_rights_than_a_verifier_is_warned_about(
    postgres_url: str, role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A role that can already insert keys is named in a warning after the grants."""
    KeyStore.open(postgres_url, hasher=CHEAP).close()
    with psycopg.connect(_libpq(postgres_url)) as conn:
        conn.execute(f"GRANT INSERT, UPDATE ON apikey_tui_key TO {role}".encode())
    code, _, err = _grant(capsys, postgres_url, role)
    assert code == 0
    [warning] = [line for line in err.splitlines() if line.startswith("warning:")]
    assert "INSERT, UPDATE (id, owner, name, public_id, secret_hash" in warning
    assert "on apikey_tui_key" in warning and "Revoke them" in warning


@pytest.mark.parametrize(
    "name", ["public", "PUBLIC", "pg_read_all_data", "svc; DROP TABLE x", 'a"b', "", "x" * 64]
)
def test_role_names_that_are_not_plain_identifiers_are_refused(
    postgres_url: str, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """PUBLIC, pg_ roles and anything not a plain identifier are refused with one line."""
    KeyStore.open(postgres_url, hasher=CHEAP).close()
    code = main(["--database-url", postgres_url, "db", "grant-verifier", name, "--apply"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and "is not allowed" in err and err.count("\n") == 1


def test_missing_role_is_refused_before_any_grant(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--apply for a role that does not exist says to create it first."""
    KeyStore.open(postgres_url, hasher=CHEAP).close()
    ghost = f"ghost_{uuid.uuid4().hex[:8]}"
    code = main(["--database-url", postgres_url, "db", "grant-verifier", ghost, "--apply"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and "create it first" in err


def test_sqlite_says_file_access_is_all_or_nothing(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """On SQLite the command explains in one line that file write access means admin rights."""
    KeyStore.open(sqlite_url, hasher=CHEAP).close()
    code = main(["--database-url", sqlite_url, "db", "grant-verifier", "svc"])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "") and err.count("\n") == 1  # the wrong database: usage
    assert "all-or-nothing" in err and "admin rights over every owner's keys" in err


def test_grants_need_this_releases_schema(
    postgres_url: str, role: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a database that is not at this release's schema the command says what to do first."""
    code = main(["--database-url", postgres_url, "db", "grant-verifier", role])
    out, err = capsys.readouterr()
    assert (code, out) == (1, "") and "no apikey-tui tables yet" in err


def test_granted_role_records_usage_and_can_do_nothing_else_with_it(
    postgres_url: str, role: str, admin_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """The verifier role appends usage counts (read back by the admin) but cannot read, change,
    delete or empty the usage table."""
    created = admin_store.create_key("alice", "svc", ["project"])
    assert _grant(capsys, postgres_url, role)[0] == 0
    verifier = Verifier.from_url(_as(role, postgres_url), hasher=CHEAP)
    try:
        for _ in range(3):
            verifier.verify("ApiKey " + created.plaintext, ["project"])
    finally:
        verifier.close()
    assert verifier.stats.snapshot()["usage_flushed"] == 3
    assert admin_store.key_usage("alice", "svc").requests == 3
    for statement in (
        "SELECT * FROM apikey_tui_usage",
        "UPDATE apikey_tui_usage SET requests = 0",
        "DELETE FROM apikey_tui_usage",
        "TRUNCATE apikey_tui_usage",
        "SELECT * FROM apikey_tui_usage_batch",
        "DELETE FROM apikey_tui_usage_batch",
    ):
        with (
            psycopg.connect(_libpq(_as(role, postgres_url))) as conn,
            pytest.raises(errors.InsufficientPrivilege),
        ):
            conn.execute(statement.encode())


def test_a_role_granted_before_version_7_keeps_recording_usage_after_the_upgrade(
    postgres_url: str, role: str, admin_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """A role that could append usage at schema version 6 may mark its flushes after `db
    upgrade` to 7 (the migration grants it), so its counts keep being recorded, once each."""
    created = admin_store.create_key("alice", "svc", ["project"])
    assert _grant(capsys, postgres_url, role)[0] == 0
    _down_and_up(postgres_url, 6)  # back to 6: the mark table goes, with the role's grant
    verifier = Verifier.from_url(_as(role, postgres_url), hasher=CHEAP)
    try:
        for _ in range(3):
            verifier.verify("ApiKey " + created.plaintext, ["project"])
    finally:
        verifier.close()
    assert verifier.stats.snapshot()["usage_dropped"] == 0
    assert admin_store.key_usage("alice", "svc").requests == 3


def test_a_role_granted_before_version_8_counts_limits_after_the_upgrade(
    postgres_url: str, role: str, admin_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """A verifier role granted at schema version 7 may take from the limits' counts after `db
    upgrade` to 8 (the migration grants it), and its grants leave it no excess privilege."""
    from apikey_tui.limits.sql_store import SqlLimitStore

    assert _grant(capsys, postgres_url, role)[0] == 0
    _down_and_up(postgres_url, 7)  # back to 7: the limits' tables go, with the role's grant
    as_role = make_engine(_as(role, postgres_url))
    try:
        store = SqlLimitStore(as_role)
        assert store.take("key:akfirst", 5, 60, 3, "").granted == 3
    finally:
        as_role.dispose()
    engine = make_engine(postgres_url)
    try:
        with engine.connect() as conn:
            assert excess_privileges(conn, role) == []
    finally:
        engine.dispose()


def test_a_role_granted_before_version_4_verifies_and_records_use_after_the_upgrade(
    postgres_url: str, role: str, admin_store: KeyStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """A verifier role granted at schema version 3 (release 0.3.0) reads the change log, appends
    usage and counts limits after `db upgrade` to this release, with no excess privilege."""
    from apikey_tui.errors import RateLimitedError
    from apikey_tui.limits.model import parse_limit

    created = admin_store.create_key("alice", "svc", ["project"])
    assert _grant(capsys, postgres_url, role)[0] == 0
    _down_and_up(postgres_url, 3)  # back to 3: every later table goes, with the role's grants
    admin_store.set_limits_of_keys([admin_store.get_key("alice", "svc")], [parse_limit("3/1h")])
    verifier = Verifier.from_url(_as(role, postgres_url), hasher=CHEAP)
    try:
        for _ in range(3):
            verifier.verify("ApiKey " + created.plaintext, ["project"])
        with pytest.raises(RateLimitedError):
            verifier.verify("ApiKey " + created.plaintext, ["project"])
    finally:
        verifier.close()
    assert verifier.stats.snapshot()["usage_dropped"] == 0
    assert admin_store.key_usage("alice", "svc").requests == 3
    engine = make_engine(postgres_url)
    try:
        with engine.connect() as conn:
            assert excess_privileges(conn, role) == []
    finally:
        engine.dispose()


def serve_leaks(url: str, port: int, action: str, folder: Path) -> list[str]:
    """The serve-leaks command on url and port, trusting a test GitHub key written in folder."""
    from tests.test_serve_leaks import Signer, write_keys

    keys = write_keys(folder, Signer("github-key-1"))
    return [
        sys.executable, "-m", "apikey_tui", "serve-leaks", "--database-url", url,
        "--port", str(port), "--action", action, "--github-keys", str(keys),
    ]  # fmt: skip


@pytest.mark.parametrize("action", ["disable", "delete"])
def test_serve_leaks_as_a_role_that_cannot_stop_keys_refuses_to_start(
    postgres_url: str,
    role: str,
    admin_store: KeyStore,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    action: str,
) -> None:
    """serve-leaks connected as a role with a verifier's grants (it may not disable or delete
    a key) exits at once with one line naming the missing privilege, serving nothing: it
    served, and the operator learned of it from the first real leak's 503, the key still live."""

    admin_store.create_key("alice", "demo", ["project"])
    assert _grant(capsys, postgres_url, role)[0] == 0
    command = serve_leaks(_as(role, postgres_url), free_port(), action, tmp_path)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("serve-leaks started serving under a role that cannot stop a key")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "lacks a privilege" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not admin_store.get_key("alice", "demo").disabled


def test_serve_leaks_as_an_admin_role_starts(
    postgres_url: str, admin_store: KeyStore, tmp_path: Path
) -> None:
    """The start-up check passes for a role that may stop keys, and leaves no trace: no event,
    no change-log entry, no key changed."""

    admin_store.create_key("alice", "demo", ["project"])
    events, position = len(admin_store.events()), admin_store.log_position()
    port = free_port()
    command = serve_leaks(postgres_url, port, "delete", tmp_path)
    server = Process("serve-leaks", command, port, tmp_path)
    try:
        assert server.process.poll() is None
    finally:
        server.stop()
    assert len(admin_store.events()) == events and admin_store.log_position() == position
    assert not admin_store.get_key("alice", "demo").disabled


def _grant_leak_writes(url: str, role: str, *more: str) -> None:
    """Give role every read of the schema and each write that stopping a key takes, then the
    statements `more` (templates of {schema} and {role})."""
    schema = str(make_url(url).query["options"]).split("=")[1]
    with psycopg.connect(_libpq(url).split("?")[0], autocommit=True) as conn:
        for grant in (
            "GRANT USAGE ON SCHEMA {schema} TO {role}",
            "GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}",
            "GRANT UPDATE, DELETE ON {schema}.apikey_tui_key TO {role}",
            "GRANT INSERT ON {schema}.apikey_tui_event, {schema}.apikey_tui_change TO {role}",
            "GRANT DELETE ON {schema}.apikey_tui_change TO {role}",
            "GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
            *more,
        ):
            conn.execute(grant.format(schema=schema, role=role).encode())


def test_serve_leaks_check_refuses_a_role_that_may_write_but_not_read_a_reported_key(
    postgres_url: str, role: str, admin_store: KeyStore
) -> None:
    """The start-up check refuses a role given every write stopping a key takes but not the
    reads judging a report takes (here the key's scopes): it passed, and every report was a 503
    at the first read, the leaked key still live."""
    from apikey_tui.errors import DatabasePermissionError

    created = admin_store.create_key("alice", "demo", ["project"])
    _grant_leak_writes(
        postgres_url, role, "REVOKE SELECT ON {schema}.apikey_tui_key_scope FROM {role}"
    )
    leaks = KeyStore.open(_as(role, postgres_url), hasher=CHEAP)
    try:
        with pytest.raises(DatabasePermissionError, match="apikey_tui_key_scope"):
            leaks.check_containment(delete=True)
        with pytest.raises(DatabasePermissionError):
            leaks.credential(created.info.public_id)  # what every report would meet
    finally:
        leaks.close()


def test_serve_leaks_starts_while_another_session_holds_the_change_logs_lock(
    postgres_url: str, admin_store: KeyStore, tmp_path: Path
) -> None:
    """serve-leaks starts, saying it could not finish its start-up check, while another session
    holds the change log's lock (any role may take it; a long admin batch does): a lock is no
    missing privilege, yet it waited 10 s and exited, leaving leak reports unanswered."""
    import time

    from apikey_tui.store.change_log import LOG_LOCK

    admin_store.create_key("alice", "demo", ["project"])
    port = free_port()
    command = serve_leaks(postgres_url, port, "delete", tmp_path)
    with psycopg.connect(_libpq(postgres_url), autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (LOG_LOCK,))
        started = time.monotonic()
        server = Process("serve-leaks", command, port, tmp_path)
        try:
            assert server.process.poll() is None
            assert time.monotonic() - started < 8, "it waited out the writes' 10 s lock wait"
            assert "could not check" in server.output()
        finally:
            server.stop()


def test_serve_leaks_check_refuses_delete_for_a_role_the_key_search_trigger_refuses(
    postgres_url: str, role: str, admin_store: KeyStore
) -> None:
    """With --action delete, the start-up check refuses a role that may delete a key row but
    not what deleting one sets off (the key search's trigger writes its terms table): it
    deleted no row, passed, and every leak report was a 503, the key still live."""
    from apikey_tui.errors import DatabasePermissionError

    created = admin_store.create_key("alice", "demo", ["project"])
    _grant_leak_writes(postgres_url, role)
    leaks = KeyStore.open(_as(role, postgres_url), hasher=CHEAP)
    try:
        leaks.check_containment(delete=False)  # disabling sets nothing off: it may
        with pytest.raises(DatabasePermissionError, match="apikey_tui_key_search_terms"):
            leaks.check_containment(delete=True)
        credential = leaks.credential(created.info.public_id)
        assert credential is not None
        with pytest.raises(DatabasePermissionError):  # what every report would meet
            leaks.contain_leak(credential, source="github", where="https://x", delete=True)
    finally:
        leaks.close()
    detail = admin_store.get_key("alice", "demo")
    assert not detail.disabled and admin_store.events(key="demo")[0].action != "key.leak"
