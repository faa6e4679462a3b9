"""`policy`, `scopes`, `events` and `db upgrade|grant-verifier`: the database's own settings."""

from __future__ import annotations

import sys

from apikey_tui.cli import arguments as a
from apikey_tui.cli.key_listing import key_json, print_keys, print_rows
from apikey_tui.cli.output import emit
from apikey_tui.cli.records import MAKES, MUST_EXIST, Arg, Command
from apikey_tui.errors import InvalidInputError
from apikey_tui.names import format_duration

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import timedelta
    from typing import Any, TextIO

    from apikey_tui.cli.records import Call
    from apikey_tui.store import KeyStore


def policy_show(call: Call) -> int:
    store, args = call.store(), call.args
    return emit(args, _policy_json(store.lifetime_policy()), _print_policy(store))


def _policy_json(maximum: timedelta | None) -> dict[str, Any]:
    return {
        "max_lifetime": format_duration(maximum) if maximum else None,
        "max_lifetime_seconds": int(maximum.total_seconds()) if maximum else None,
    }


def _print_policy(store: KeyStore) -> Callable[[TextIO], None]:
    maximum = store.lifetime_policy()
    shown = format_duration(maximum) if maximum else "none"
    return lambda out: print(f"max-lifetime {shown}", file=out)


def policy_set(call: Call) -> int:
    store, args = call.store(), call.args
    violating = store.set_lifetime_policy(args.value)
    if args.value is None:
        print("Removed the max-lifetime policy: new keys may live for ever.", file=sys.stderr)
    else:
        print(
            f"New and rotated keys now live at most {format_duration(args.value)}.",
            file=sys.stderr,
        )
    if violating:
        some = (
            "1 existing key breaks it and keeps"
            if len(violating) == 1
            else f"{len(violating)} existing keys break it and keep"
        )
        print(
            f"{some} working until rotated, re-expired or deleted: "
            "`apikey-tui keys list --all --violating-policy`.",
            file=sys.stderr,
        )
    now = store.clock()

    def human(out: TextIO) -> None:
        if violating:
            print_keys(violating, out, with_owner=True, now=now)

    data = {**_policy_json(args.value), "violating": [key_json(k, now) for k in violating]}
    return emit(args, data, human)


def scopes_list(call: Call) -> int:
    store, args = call.store(), call.args
    scopes = store.list_scopes()
    return emit(
        args,
        [s.to_json() for s in scopes],
        lambda out: print_rows(
            ["SCOPE", "DESCRIPTION"], [[s.name, s.description] for s in scopes], out
        ),
    )


def scopes_add(call: Call) -> int:
    store, args = call.store(), call.args
    scope = store.add_scope(args.name, args.description)
    print(f"Added scope {scope.name!r}.", file=sys.stderr)
    return emit(args, scope.to_json(), lambda out: None)


def scopes_describe(call: Call) -> int:
    store, args = call.store(), call.args
    scope = store.describe_scope(args.name, args.description)
    print(f"Described scope {scope.name!r}.", file=sys.stderr)
    return emit(args, scope.to_json(), lambda out: None)


def scopes_remove(call: Call) -> int:
    store, args = call.store(), call.args
    store.remove_scope(args.name)
    print(f"Removed scope {args.name!r}.", file=sys.stderr)
    return emit(args, {"removed": args.name}, lambda out: None)


def events(call: Call) -> int:
    store, args = call.store(), call.args
    events = store.events(args.limit)
    rows = [
        [
            e.at.strftime("%Y-%m-%d %H:%M:%S"),
            e.action,
            # An owner.* event has no key or scope: its owner is what it is about.
            f"{e.owner}/{e.key_name}" if e.key_name else (e.scope or e.owner or ""),
            e.public_id or "",
            e.actor + (f"@{e.actor_address}" if e.actor_address else ""),
            e.detail,
        ]
        for e in events
    ]
    header = ["WHEN (UTC)", "ACTION", "KEY/OWNER/SCOPE", "PUBLIC ID", "BY", "DETAIL"]
    return emit(args, [e.to_json() for e in events], lambda out: print_rows(header, rows, out))


SCHEMA_WITH_EXPIRY = 3  # the schema version that brought disable and expiry (release 0.3.0)


def db_upgrade(call: Call) -> int:
    url, args = call.url(), call.args
    from apikey_tui.db import make_engine, upgrade_schema
    from apikey_tui.db.schema import FLOOR_NEEDS

    engine = make_engine(url)
    try:
        before, after, searchable, raised_floor = upgrade_schema(engine)
    finally:
        engine.dispose()
    if before is None:
        message = f"Created the apikey-tui tables at schema version {after}."
    elif before == after:
        message = f"The database is already at schema version {after}."
    else:
        message = f"Upgraded the database from schema version {before} to {after}."
    print(message, file=sys.stderr)
    if before is not None and before < after:
        # A verifier checks the schema version when it starts, never again: one running through
        # the upgrade keeps its old code, and before version 3 that code reads no disabled_at
        # or expires_at, so it goes on accepting keys an admin disables or lets expire.
        stale = (
            ", and that release keeps accepting disabled and expired keys (it knows neither)"
            if before < SCHEMA_WITH_EXPIRY
            else ""
        )
        # A verifier that has the verifiers_from check (schema 5 names 4) accepts this database
        # when it starts, and judges only what its release knew, until the database stores a
        # limit or an enforced rule (`schema.require_verifiers`): never promise a 503.
        print(
            "Restart every service now, on this release: one started before the upgrade runs "
            f"its old release until it restarts{stale}. An older release started after the "
            "upgrade answers 503 (0.3 and older; before 0.7.0 once a limit is set, before "
            "0.8.0 once a network rule is enforced) or answers without what it does not know "
            "(limits before 0.7.0, network rules before 0.8.0, while none is stored).",
            file=sys.stderr,
        )
    if raised_floor is not None and raised_floor in FLOOR_NEEDS:
        # Said even at the same schema version: 0.9.0 stored rules without raising the floor.
        what, release = FLOOR_NEEDS[raised_floor]
        print(
            f"This database holds {what}: a service on a release before {release} now answers "
            "503 when it starts, instead of ignoring them (one running keeps going until it "
            "restarts); restart every service on this release.",
            file=sys.stderr,
        )
    if not searchable:
        print(
            "The key filter scans every key: this database cannot hold its trigram index "
            "(SQLite without FTS5 trigrams, or a PostgreSQL role that may not create the "
            "pg_trgm extension; see docs/guide/app.md).",
            file=sys.stderr,
        )
    result = {
        "from_version": before,
        "to_version": after,
        "filter_index": searchable,
        "raised_verifiers_from": raised_floor,
    }
    return emit(args, result, lambda out: None)


SQLITE_PRIVILEGES = (
    "SQLite has no roles: file access is all-or-nothing, and whoever may write the database "
    "file (as a verifier must) has admin rights over every owner's keys; use PostgreSQL to "
    "give services less"
)


def db_grant_verifier(call: Call) -> int:
    url, args = call.url(), call.args
    from apikey_tui.db import database_errors, ensure_schema, make_engine
    from apikey_tui.db.schema import (
        check_role_name,
        excess_privileges,
        role_exists,
        verifier_grants,
    )

    engine = make_engine(url, create=False)
    try:
        if engine.dialect.name != "postgresql":
            raise InvalidInputError(SQLITE_PRIVILEGES)
        check_role_name(args.role)
        ensure_schema(engine, create=False)  # the grants name this release's tables
        with database_errors(engine), engine.begin() as conn:
            statements = verifier_grants(conn, args.role)
            exists = role_exists(conn, args.role)
            if args.apply and not exists:
                raise InvalidInputError(
                    f"no PostgreSQL role named {args.role!r}: create it first "
                    "(CREATE ROLE ... LOGIN), then grant"
                )
            for statement in statements if args.apply else ():
                conn.exec_driver_sql(statement)
            excess = excess_privileges(conn, args.role) if exists else []
    finally:
        engine.dispose()
    if args.apply:
        print(f"Granted to {args.role} what a verifier needs:", file=sys.stderr)
    else:
        print("Run these as the owner of the apikey-tui tables (or add --apply):", file=sys.stderr)
    if excess:
        print(
            f"warning: {args.role} can also make writes a verifier never needs, which would let "
            f"a compromised service plant keys or hide its tracks: {'; '.join(excess)}. "
            "Revoke them.",
            file=sys.stderr,
        )
    data = {"role": args.role, "statements": statements, "applied": args.apply, "excess": excess}
    return emit(args, data, lambda out: print(*(f"{s};" for s in statements), sep="\n", file=out))


POLICY_SHOW = Command(
    "policy show",
    help="show the policy",
    run=policy_show,
    database=MUST_EXIST,
    arguments=a.COMMON,
    examples=("apikey-tui policy show --json",),
)
POLICY_SET = Command(
    "policy set",
    help="set max-lifetime (new keys); lists keys that break it",
    run=policy_set,
    database=MUST_EXIST,
    arguments=(
        *a.COMMON,
        Arg("setting", choices=["max-lifetime"]),
        Arg("value", type=a.max_lifetime, metavar="DURATION|none", help="e.g. 365d, or none"),
    ),
    examples=(
        "apikey-tui policy set max-lifetime 365d",
        "apikey-tui policy set max-lifetime none",
    ),
)
SCOPES_LIST = Command(
    "scopes list",
    help="list scopes",
    run=scopes_list,
    database=MUST_EXIST,
    arguments=a.COMMON,
    examples=("apikey-tui scopes list --json",),
)
SCOPES_ADD = Command(
    "scopes add",
    help="add a scope",
    run=scopes_add,
    database=MUST_EXIST,
    arguments=(*a.COMMON, a.NAME, Arg("--description", default="")),
    examples=("apikey-tui scopes add serving --description 'the model serving API'",),
)
SCOPES_DESCRIBE = Command(
    "scopes describe",
    help="describe a scope",
    run=scopes_describe,
    database=MUST_EXIST,
    arguments=(*a.COMMON, a.NAME, Arg("description")),
    examples=("apikey-tui scopes describe serving 'served models: predict, explain'",),
)
SCOPES_REMOVE = Command(
    "scopes remove",
    help="remove an unused scope",
    run=scopes_remove,
    database=MUST_EXIST,
    arguments=(*a.COMMON, a.NAME),
    examples=("apikey-tui scopes remove legacy",),
)
EVENTS = Command(
    "events",
    help="the audit trail, newest first",
    run=events,
    database=MUST_EXIST,
    arguments=(
        *a.COMMON,
        Arg("--limit", type=a.limit, default=50, help=f"at most this many (1-{a.LIMIT_MAX})"),
    ),
    examples=("apikey-tui events --limit 20", "apikey-tui events --json | jq '.[0]'"),
)
DB_UPGRADE = Command(
    "db upgrade",
    help="upgrade the schema in place (upgrade services with it)",
    run=db_upgrade,
    database=MAKES,  # works on a database of any version: opens no store
    arguments=a.COMMON,
    examples=("apikey-tui db upgrade --database-url postgresql+psycopg://admin@db/keys",),
)
DB_GRANT_VERIFIER = Command(
    "db grant-verifier",
    help="print the PostgreSQL grants a service's verifier role needs (and no more)",
    run=db_grant_verifier,
    database=MUST_EXIST,
    arguments=(
        *a.COMMON,
        Arg("role", help="the PostgreSQL role the service connects as"),
        Arg("--apply", action="store_true", help="run the grants now, as the owner"),
    ),
    examples=(
        "apikey-tui db grant-verifier svc_reader            # print the grants",
        "apikey-tui db grant-verifier svc_reader --apply    # run them",
    ),
)
